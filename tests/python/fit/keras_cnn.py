"""A Keras CNN (six 3x3 convolutions, Adam) trained on random images, as users write them:
`oomscope fit`'s TensorFlow test program.

    python keras_cnn.py --batch 16 [--steps 10]
"""
import argparse

import numpy as np
import tensorflow as tf

ap = argparse.ArgumentParser()
ap.add_argument("--batch", type=int, required=True)
ap.add_argument("--steps", type=int, default=10)
args = ap.parse_args()

tf.keras.utils.set_random_seed(0)
x = np.random.rand(args.batch * args.steps, 32, 32, 3).astype("float32")
y = np.random.randint(0, 10, args.batch * args.steps)
layers = [tf.keras.layers.Input((32, 32, 3))]
for filters in (32, 32, 64, 64, 64, 64):
    layers.append(tf.keras.layers.Conv2D(filters, 3, padding="same", activation="relu"))
layers += [tf.keras.layers.GlobalAveragePooling2D(), tf.keras.layers.Dense(10)]
model = tf.keras.Sequential(layers)
model.compile("adam", tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True))
model.fit(x, y, batch_size=args.batch, epochs=1, verbose=0)
print("trained", args.batch, flush=True)
