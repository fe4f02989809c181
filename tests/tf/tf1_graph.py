"""A TF1-style graph run with report_tensor_allocations_upon_oom: TF lists the live tensors
by node (`Current usage from device`). The batch makes the working set too large."""
from common import run, tf

v1 = tf.compat.v1
v1.disable_eager_execution()
x = v1.placeholder(tf.float32, [None, 128, 128, 16], name="images")
h = x
for i in range(4):
    w = v1.get_variable(f"conv{i}/kernel", [3, 3, 16, 16])
    h = tf.nn.relu(tf.nn.conv2d(h, w, 1, "SAME"), name=f"conv{i}/relu")
loss = tf.reduce_mean(h)
train = v1.train.GradientDescentOptimizer(0.1).minimize(loss)
options = v1.RunOptions(report_tensor_allocations_upon_oom=True)
with v1.Session() as sess:
    sess.run(v1.global_variables_initializer())
    import numpy as np
    feed = {x: np.random.rand(128, 128, 128, 16).astype("float32")}
    run(lambda: sess.run(train, feed_dict=feed, options=options))
