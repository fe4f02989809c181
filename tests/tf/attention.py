"""Self-attention over a long sequence: the score matrix (batch x heads x L x L) alone is
larger than the limit."""
import numpy as np
from common import run, tf

L = 2048
x = np.random.rand(4, L, 64).astype("float32")
mha = tf.keras.layers.MultiHeadAttention(num_heads=8, key_dim=16)
run(lambda: mha(x, x))
