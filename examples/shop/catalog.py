"""Products and the catalog they live in."""

CATALOG_DATA = """\
PEN-01,Gel pen,150,office
NB-A5,A5 notebook,420,office
BK-PY,Python book,3900,books
MUG-1,Coffee mug,890,kitchen
"""


class Product:
    tax_rate = 0.2

    def __init__(self, sku, name, price_cents, category):
        self.sku = sku
        self.name = name
        self.price_cents = price_cents
        self.category = category

    @classmethod
    def from_csv_line(cls, line):
        sku, name, price, category = line.split(",")
        return cls(sku, name, int(price), category)

    @staticmethod
    def format_cents(cents):
        return "%d.%02d" % divmod(cents, 100)

    @property
    def price_with_tax(self):
        return round(self.price_cents * (1 + self.tax_rate))

    def describe(self):
        return "%s [%s]" % (self.name, self.category)


def load_catalog(text=CATALOG_DATA):
    products = [Product.from_csv_line(line) for line in text.splitlines()]
    return {product.sku: product for product in products}
