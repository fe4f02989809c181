"""A Keras CNN trained at a batch too large for the memory: no single tensor is larger than
the limit, the working set of the step is (a true peak)."""
import numpy as np
from common import run, tf

x = np.random.rand(256, 64, 64, 3).astype("float32")
y = np.random.randint(0, 10, 256)
model = tf.keras.Sequential([
    tf.keras.layers.Input((64, 64, 3)),
    tf.keras.layers.Conv2D(32, 3, padding="same", activation="relu"),
    tf.keras.layers.Conv2D(32, 3, padding="same", activation="relu"),
    tf.keras.layers.Conv2D(32, 3, padding="same", activation="relu"),
    tf.keras.layers.GlobalAveragePooling2D(),
    tf.keras.layers.Dense(10),
])
model.compile("adam", tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True))
run(lambda: model.fit(x, y, batch_size=128, epochs=1, verbose=0))
