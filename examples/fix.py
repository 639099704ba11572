"""A hot fix for the shop example, for ``fntrace live --patch``:

    fntrace live --patch 'shop.pricing.bundle_price=examples/fix.py:better_bundle' \
                 examples/shop_demo.py

``better_bundle`` replaces ``shop.pricing.bundle_price`` for the run: it gets the
original and the arguments, and decides whether and how to call it.
"""


def better_bundle(original, unit_cents, quantity):
    # Pairs at 1.8 units, worked out directly instead of pair by pair; one item is
    # left to the original.
    pairs, rest = divmod(quantity, 2)
    return unit_cents * 18 // 10 * pairs + original(unit_cents, rest)
