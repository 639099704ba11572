"""Discount rules, bundle pricing and coupons."""

COUPONS = {"SAVE10": 10}


def bulk_discount(product, quantity):
    return 10 if quantity >= 3 else 0


def category_discount(product, quantity):
    return 5 if product.category == "books" else 0


DISCOUNT_RULES = [bulk_discount, category_discount]


def best_discount_percent(product, quantity):
    return max(rule(product, quantity) for rule in DISCOUNT_RULES)


def bundle_price(unit_cents, quantity):
    """Every pair costs 1.8 units; priced recursively pair by pair."""
    if quantity <= 1:
        return unit_cents * quantity
    return unit_cents * 18 // 10 + bundle_price(unit_cents, quantity - 2)


def lookup_coupon(code):
    if code not in COUPONS:
        raise ValueError("unknown coupon %r" % code)
    return COUPONS[code]


def coupon_percent(code):
    try:
        return lookup_coupon(code)
    except ValueError:
        return 0


def price_line(product, quantity):
    gross = bundle_price(product.price_with_tax, quantity)
    return gross - gross * best_discount_percent(product, quantity) // 100


def price_cart(cart, coupon_codes=()):
    line_totals = {product.sku: price_line(product, quantity)
                   for product, quantity in cart.iter_lines()}
    subtotal = sum(line_totals.values())
    percent = max([coupon_percent(code) for code in coupon_codes] + [0])
    return line_totals, subtotal, subtotal * percent // 100
