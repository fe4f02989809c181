"""Differential 1: tensors of chosen sizes created and freed in a chosen order, the pool
growing region by region, then a request the limit cannot hold."""
from common import run, tf

def body():
    a = tf.fill([256 * 1024], 1.0)        # 1 MiB
    b = tf.fill([3 * 256 * 1024], 2.0)    # 3 MiB
    c = tf.fill([5 * 256 * 1024], 3.0)    # 5 MiB
    del b
    d = tf.fill([2 * 256 * 1024], 4.0)    # 2 MiB: into b's hole
    e = tf.fill([12 * 256 * 1024], 5.0)   # 12 MiB
    del a
    f = tf.fill([40 * 256 * 1024], 6.0)   # 40 MiB: more than the pool can still take
    print(float(f[0] + c[0] + d[0] + e[0]))

run(body)
