"""The shopping cart."""


class Cart:
    def __init__(self):
        self.quantities = {}
        self.products = {}

    def add_item(self, product, quantity=1):
        self.products[product.sku] = product
        self.quantities[product.sku] = self.quantities.get(product.sku, 0) + quantity

    def item_count(self):
        return sum(self.quantities.values())

    def items_by_price(self):
        products = self.products.values()
        return sorted(products, key=lambda p: (-p.price_cents, p.sku))

    def iter_lines(self):
        for product in self.items_by_price():
            yield product, self.quantities[product.sku]

    def receipt_lines(self, line_totals):
        def format_line(product, quantity):
            total = product.format_cents(line_totals[product.sku])
            return "  %d x %-22s %8s" % (quantity, product.describe(), total)

        return [format_line(product, quantity) for product, quantity in self.iter_lines()]
