"""Two runs to compare with ``fntrace diff``: ``python diff_demo.py base`` and
``python diff_demo.py new``.  The new run is slower in ``slow``, calls ``query`` three
times per item instead of once (an N+1 query), calls ``audit`` and no longer calls
``legacy``."""
import sys
import time

NEW = sys.argv[1:] == ["new"]


def slow(i):
    time.sleep(0.003 if NEW else 0.0002)


def query(i):
    return i * 2


def audit(i):
    return i


def legacy(i):
    return -i


def main():
    for i in range(50):
        slow(i)
        for _ in range(3 if NEW else 1):
            query(i)
        if NEW:
            audit(i)
        else:
            legacy(i)


main()
