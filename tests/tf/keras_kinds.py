"""A Keras model trained with Adam for a few steps at a small batch, then at one too large:
its OOM comes after the optimizer made its slots. With a file name as argument, it writes
there what the model's weights and Adam's slots hold, by Keras's own count (JSON).

    python keras_kinds.py [TRUTH.json]
"""
import json
import sys

import numpy as np
import tensorflow as tf

x = np.random.rand(512, 32, 32, 3).astype("float32")
y = np.random.randint(0, 10, 512)
model = tf.keras.Sequential([
    tf.keras.layers.Input((32, 32, 3)),
    tf.keras.layers.Conv2D(64, 3, padding="same", activation="relu"),
    tf.keras.layers.Conv2D(128, 3, padding="same", activation="relu"),
    tf.keras.layers.GlobalAveragePooling2D(),
    tf.keras.layers.Dense(2048, activation="relu"),
    tf.keras.layers.Dense(10),
])
model.compile("adam", tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True))
model.fit(x[:64], y[:64], batch_size=16, epochs=1, verbose=0)


def nbytes(v):
    return int(np.prod(tuple(v.shape))) * tf.as_dtype(v.dtype).size


if len(sys.argv) > 1:
    with open(sys.argv[1], "w") as f:
        json.dump({
            "weight": sum(nbytes(v) for v in model.weights),
            "optimizer": sum(nbytes(v) for v in model.optimizer.variables),
        }, f)
print("trained at 16", flush=True)
model.fit(x, y, batch_size=512, epochs=1, verbose=0)
print("trained at 512")
