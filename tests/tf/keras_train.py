"""A Keras training script as users write them: no oomscope in it, the OOM not caught."""
import os
import sys

if len(sys.argv) > 1:
    os.environ["TF_CPP_MIN_LOG_LEVEL"] = sys.argv[1]  # as scripts silence TF
import numpy as np
import tensorflow as tf

print("training starts", flush=True)
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
model.fit(x, y, batch_size=128, epochs=1, verbose=0)
print("training done")
