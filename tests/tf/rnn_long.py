"""An LSTM trained over long sequences: backward keeps every time step's activations."""
import numpy as np
from common import run, tf

x = np.random.rand(64, 2000, 32).astype("float32")
y = np.random.rand(64, 1).astype("float32")
model = tf.keras.Sequential([
    tf.keras.layers.Input((2000, 32)),
    tf.keras.layers.LSTM(128),
    tf.keras.layers.Dense(1),
])
model.compile("sgd", "mse")
run(lambda: model.fit(x, y, batch_size=64, epochs=1, verbose=0))
