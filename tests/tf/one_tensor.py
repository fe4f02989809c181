"""One tensor larger than the whole limit."""
from common import run, tf

run(lambda: print(float(tf.reduce_sum(tf.ones([512, 1024, 1024])))))  # 2 GiB
