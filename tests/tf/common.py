"""Shared by the scenarios: TensorFlow quiet except for what the tests read, one thread
(a deterministic allocation order), and a clear exit code when the OOM happens."""
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "0")
import tensorflow as tf  # noqa: E402

tf.config.threading.set_inter_op_parallelism_threads(1)
tf.config.threading.set_intra_op_parallelism_threads(1)


def run(body):
    """Runs `body`; exits 3 on TensorFlow's OOM (what the tests expect), 0 when it fits."""
    try:
        body()
    except tf.errors.ResourceExhaustedError as e:
        print("scenario: OOM", type(e).__name__, file=sys.stderr)
        sys.exit(3)
    print("scenario: no OOM", file=sys.stderr)
