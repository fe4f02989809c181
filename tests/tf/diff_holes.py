"""Differential 2: every other tensor freed, neighbours coalescing, then a request larger
than any hole."""
from common import run, tf

def body():
    kept = []
    for i in range(12):
        t = tf.fill([(2 + i % 3) * 256 * 1024], float(i))  # 2, 3 or 4 MiB
        kept.append(t)
    for i in range(0, 12, 2):
        kept[i] = None
    kept[3] = None                                          # merges with its free neighbours
    g = tf.fill([40 * 256 * 1024], 1.0)                     # 40 MiB
    print(float(g[0]))

run(body)
