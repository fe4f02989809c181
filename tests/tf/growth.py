"""A loop that keeps every step's output (a list of tensors that grows): memory grows step
after step until the OOM."""
from common import run, tf

def body():
    kept = []
    w = tf.random.normal([256, 256])
    for step in range(100000):
        x = tf.random.normal([4096, 256])
        kept.append(tf.matmul(x, w))  # 4 MiB a step, never freed

run(body)
