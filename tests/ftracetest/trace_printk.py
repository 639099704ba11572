"""The kernel's samples/trace_printk module, for func_mod_trace.tc: loaded on request."""


def trace_printk_irq_work():
    return 0


def trace_printk_init():
    return trace_printk_irq_work()


trace_printk_init()
