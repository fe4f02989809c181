//! What an allocation is for and what happened to it: the kinds a dump, a trace and the
//! live feed share.

use serde::{Deserialize, Serialize};

/// What a tensor is for: the verdict says which of these dominates at a peak.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    /// Not given; [`Kind::infer`] guesses from the op name.
    #[default]
    Unknown,
    /// Trainable variables and other persistent model state.
    Weight,
    /// Optimizer slots (Adam's m and v, momentum).
    Optimizer,
    /// The batch fed to the model (images, labels).
    Input,
    /// Forward outputs, kept while backward still needs them.
    Activation,
    /// Gradients of the weights (`.grad`): as large as the weights, whatever the batch.
    Gradient,
    /// Scratch memory freed by the op that made it (cuDNN workspaces).
    Temporary,
    /// The backward pass's own tensors: gradients of activations and what autograd keeps
    /// between nodes (PyTorch's profiler calls them autograd detail). They scale with the
    /// batch.
    Backward,
    /// Buffers of collective communication: DDP's gradient buckets, FSDP's all-gather and
    /// reduce-scatter buffers.
    Collective,
}

impl Kind {
    pub const ALL: [Kind; 8] = [
        Kind::Activation,
        Kind::Backward,
        Kind::Gradient,
        Kind::Weight,
        Kind::Optimizer,
        Kind::Input,
        Kind::Temporary,
        Kind::Collective,
    ];

    /// The name used in traces, dumps and reports.
    pub fn name(self) -> &'static str {
        match self {
            Kind::Unknown => "unknown",
            Kind::Weight => "weight",
            Kind::Optimizer => "optimizer",
            Kind::Input => "input",
            Kind::Activation => "activation",
            Kind::Gradient => "gradient",
            Kind::Temporary => "temporary",
            Kind::Backward => "backward",
            Kind::Collective => "collective",
        }
    }

    /// Whether a smaller batch (or sequence, or resolution) shrinks it: activations, inputs,
    /// the backward pass's tensors and scratch memory do; weights, their gradients,
    /// optimizer state and collective buffers do not. Memory of no known kind is counted as
    /// scaling, as it mostly is.
    pub fn scales_with_batch(self) -> bool {
        !matches!(self, Kind::Weight | Kind::Gradient | Kind::Optimizer | Kind::Collective)
    }

    /// The kind's number in the C ABI (`oomscope_kind_set`, `oomscope_tag`): stable.
    pub fn code(self) -> i32 {
        match self {
            Kind::Unknown => 0,
            Kind::Weight => 1,
            Kind::Gradient => 2,
            Kind::Optimizer => 3,
            Kind::Input => 4,
            Kind::Activation => 5,
            Kind::Temporary => 6,
            Kind::Backward => 7,
            Kind::Collective => 8,
        }
    }

    /// The kind of a C ABI number; `None` for a number that names none.
    pub fn from_code(code: i32) -> Option<Kind> {
        [
            Kind::Unknown,
            Kind::Weight,
            Kind::Gradient,
            Kind::Optimizer,
            Kind::Input,
            Kind::Activation,
            Kind::Temporary,
            Kind::Backward,
            Kind::Collective,
        ]
        .into_iter()
        .find(|k| k.code() == code)
    }

    /// The kind in prose: `activations`, `optimizer state`.
    pub fn plural(self) -> &'static str {
        match self {
            Kind::Unknown => "unclassified memory",
            Kind::Weight => "weights",
            Kind::Optimizer => "optimizer state",
            Kind::Input => "inputs",
            Kind::Activation => "activations",
            Kind::Gradient => "gradients",
            Kind::Temporary => "temporaries",
            Kind::Backward => "backward-pass tensors",
            Kind::Collective => "collective buffers",
        }
    }

    /// Parses a trace's `kind` field.
    pub fn parse(s: &str) -> Option<Kind> {
        Some(match s {
            "weight" => Kind::Weight,
            "optimizer" => Kind::Optimizer,
            "input" => Kind::Input,
            "activation" => Kind::Activation,
            "gradient" => Kind::Gradient,
            "temporary" => Kind::Temporary,
            "backward" => Kind::Backward,
            "collective" => Kind::Collective,
            "unknown" => Kind::Unknown,
            _ => return None,
        })
    }

    /// A guess from TensorFlow's naming conventions, for data that did not say:
    /// `gradients/...` and `..._grad/...` are the backward pass's tensors, but for the ops
    /// that make a weight's gradient (`Conv2DBackpropFilter`, `BiasAddGrad`), gradients; slot names (`/Adam`, `/Momentum`,
    /// `/RMSProp`) optimizer state; variables (`kernel`, `bias`, `weights`, `Variable`,
    /// `embeddings`, batch-norm statistics) weights; `workspace` temporaries; the rest
    /// activations. Keras 3 names too: `gradient_tape/...` the backward pass, an optimizer's
    /// variables (`adam/..._momentum`, `_velocity`, `adam/iteration`) optimizer state. A name
    /// that is not an op's (empty, `unknown`, or one of oomscope's own in parentheses:
    /// `(allocated before recording began)`) says nothing: unknown.
    pub fn infer(op: &str) -> Kind {
        let last = op.rsplit('/').next().unwrap_or(op);
        let first = op.split('/').next().unwrap_or(op);
        if op.is_empty() || op == "unknown" || op.starts_with('(') {
            return Kind::Unknown;
        }
        let keras_optimizer =
            ["adam", "adamw", "sgd", "rmsprop", "adagrad", "adadelta", "adamax", "nadam", "lion", "ftrl"]
                .contains(&first)
                && op.contains('/');
        if op.starts_with("gradients") || op.contains("_grad/") || op.contains("gradient_tape/") {
            if last.contains("BackpropFilter") || last.starts_with("BiasAddGrad") {
                Kind::Gradient
            } else {
                Kind::Backward
            }
        } else if ["Adam", "Adam_1", "Momentum", "RMSProp", "RMSProp_1", "Adagrad", "Ftrl", "Ftrl_1"].contains(&last)
            || op.contains("/Adam/")
            || keras_optimizer
        {
            Kind::Optimizer
        } else if [
            "kernel",
            "bias",
            "weights",
            "biases",
            "embeddings",
            "gamma",
            "beta",
            "moving_mean",
            "moving_variance",
        ]
        .contains(&last)
            || last.starts_with("Variable")
        {
            Kind::Weight
        } else if op.contains("workspace") {
            Kind::Temporary
        } else {
            Kind::Activation
        }
    }

    /// The kind given, or else the one inferred from the op name.
    pub fn or_infer(self, op: &str) -> Kind {
        if self == Kind::Unknown { Kind::infer(op) } else { self }
    }
}

/// What happened.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EventKind {
    /// A tensor was allocated (`addr`, `size` = chunk size, `requested`).
    Alloc,
    /// A tensor was freed.
    Free,
    /// An allocation failed (`requested`, `size` = rounded request).
    Oom,
    /// A training step began (`step`).
    Step,
    /// The allocator obtained a region from the device (`addr`, `size`).
    Extend,
    /// The device refused a region of `size` bytes.
    Refused,
    /// Garbage collection returned an empty region to the device.
    RegionFree,
    /// Memory taken directly from the device, outside the allocator's pool (cuDNN, cuBLAS).
    OutsideAlloc,
    /// Outside memory given back.
    OutsideFree,
}

/// Live bytes at a step boundary: what the growth-across-steps verdict reads.
#[derive(Default, Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct StepMark {
    pub step: i64,
    pub t_ns: u64,
    pub bytes_in_use: u64,
    pub pool_bytes: u64,
    /// Live allocations at the mark.
    pub live: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_are_inferred_from_tf_names() {
        for (op, kind) in [
            ("gradients/shared_model/unet_07/Conv2D_grad/Conv2DBackpropFilter", Kind::Gradient),
            ("model/dense/MatMul_grad/MatMul", Kind::Backward),
            ("gradients/model/dense/BiasAdd_grad/BiasAddGrad", Kind::Gradient),
            ("unet_conv_00_w/Adam_1", Kind::Optimizer),
            ("model/dense/kernel", Kind::Weight),
            ("Variable_3", Kind::Weight),
            ("model/bn/moving_mean", Kind::Weight),
            ("model/layer01/Conv2D/workspace", Kind::Temporary),
            ("shared_model/unet_00/Conv2D", Kind::Activation),
            ("StatefulPartitionedCall/gradient_tape/sequential_1/conv2d_1/Conv2D/Conv2DBackpropInput", Kind::Backward),
            ("adam/sequential_dense_kernel_momentum", Kind::Optimizer),
            ("adam/iteration", Kind::Optimizer),
            ("sequential/dense/kernel", Kind::Weight),
            ("(allocated before recording began)", Kind::Unknown),
            ("unknown", Kind::Unknown),
            ("", Kind::Unknown),
        ] {
            assert_eq!(Kind::infer(op), kind, "{op}");
        }
        assert_eq!(Kind::Input.or_infer("gradients/x"), Kind::Input, "a given kind wins");
        for k in Kind::ALL {
            assert_eq!(Kind::parse(k.name()), Some(k));
        }
    }
}
