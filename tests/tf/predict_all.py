"""Evaluation of a whole set in one batch: the first activation alone is larger than the
limit (one tensor too large)."""
import numpy as np
from common import run, tf

x = np.random.rand(2000, 64, 64, 3).astype("float32")
model = tf.keras.Sequential([
    tf.keras.layers.Input((64, 64, 3)),
    tf.keras.layers.Conv2D(64, 3, padding="same", activation="relu"),
    tf.keras.layers.GlobalAveragePooling2D(),
    tf.keras.layers.Dense(10),
])
run(lambda: model.predict(x, batch_size=len(x), verbose=0))
