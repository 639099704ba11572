"""A tiny shop: catalog, cart and pricing (example program for fntrace)."""
