"""Freed tensors leave holes: half of many equal tensors are freed, the free memory would
hold the next request but no hole does (fragmentation)."""
from common import run, tf

def body():
    keep, holes = [], []
    for i in range(30):
        t = tf.fill([2 * 1024 * 1024], float(i))  # 8 MiB each
        (keep if i % 2 else holes).append(t)
    del holes[:]
    big = tf.fill([6 * 1024 * 1024], 1.0)  # 24 MiB: more than any hole
    print(float(big[0]), len(keep))

run(body)
