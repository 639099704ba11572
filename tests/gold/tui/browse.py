import threading
def leaf(x):
    return x * 2
def mid(i):
    return leaf(i) + leaf(i + 1)
def work(n):
    t = 0
    for i in range(n):
        t += mid(i)
    return t
def main():
    th = threading.Thread(target=work, args=(3,), name="worker")
    th.start(); th.join()
    return work(5)
main()
