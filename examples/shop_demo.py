"""Entry point of the shop example: python examples/shop_demo.py"""

import os
import sys
import threading

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from shop.cart import Cart  # noqa: E402
from shop.catalog import Product, load_catalog  # noqa: E402
from shop.pricing import price_cart  # noqa: E402


def fill_cart(catalog):
    cart = Cart()
    cart.add_item(catalog["PEN-01"], 3)
    cart.add_item(catalog["BK-PY"])
    cart.add_item(catalog["MUG-1"], 2)
    return cart


def price_in_worker(cart, coupon_codes, result):
    result["pricing"] = price_cart(cart, coupon_codes)


def print_receipt(cart, line_totals, subtotal, discount):
    fmt = Product.format_cents
    print("Receipt: %d items" % cart.item_count())
    for line in cart.receipt_lines(line_totals):
        print(line)
    print("  coupon %29s" % ("-" + fmt(discount)))
    print("  total %30s" % fmt(subtotal - discount))


def main():
    catalog = load_catalog()
    cart = fill_cart(catalog)
    result = {}
    worker = threading.Thread(target=price_in_worker, name="pricing",
                              args=(cart, ["EXPIRED", "SAVE10"], result))
    worker.start()
    worker.join()
    print_receipt(cart, *result["pricing"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
