"""Differential 3: variables (long-lived) and temporaries (freed right away), then one
activation too large."""
from common import run, tf

def body():
    w1 = tf.Variable(tf.zeros([1024, 1024]))        # 4 MiB
    w2 = tf.Variable(tf.zeros([2048, 1024]))        # 8 MiB
    for i in range(3):
        t = tf.matmul(w1, w1)                       # 4 MiB temporaries
        w1.assign_add(t * 0.0)
    x = tf.zeros([8192, 1024])                      # 32 MiB
    y = tf.matmul(x, w2, transpose_b=True)          # 64 MiB: over the limit
    print(float(y[0, 0]))

run(body)
