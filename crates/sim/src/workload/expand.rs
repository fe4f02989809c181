//! Expanding a [`Model`] into an allocation trace (the replay format), memory only: nothing
//! is computed on tensors.
//!
//! The rules follow TensorFlow's executor:
//! - weights (and batch-norm statistics) are allocated once, before the first step, then the
//!   optimizer's slots;
//! - each step feeds its batch, runs the ops in order, and frees a tensor once its last user
//!   is done — in training the users include the backward ops that need it (a convolution
//!   keeps its input, batch norm its input, ReLU its output, max pooling both...);
//! - `BiasAdd`, `Relu` and `add` reuse their input's buffer when they are its last user, as
//!   TF's `forward_input_or_allocate_output` does; TF's report then charges the memory to
//!   the node that allocated it (`Conv2D`), and so does this one;
//! - backward runs in reverse, allocating gradients only on paths that reach a weight; a
//!   gradient that reaches a tensor with several users is summed (`gradients/AddN`); each
//!   weight's gradient is applied and freed as soon as it exists (TF's dataflow runs the
//!   `Apply*` op then);
//! - memory other libraries take from the device (`outside`) is taken when step 0 starts.
//!
//! A model file is input like any other, and a hostile one is refused, not obeyed: sizes are
//! computed with checked arithmetic (a tensor beyond 2^64 bytes is refused, naming the
//! layer), the work is linear in the layers, and the trace is bounded ([`MAX_STEPS`],
//! [`MAX_EVENTS`]) because it is held in memory for the replay.

use super::model::{DType, DataFormat, Layer, LayerOp, Mode, Model, Padding};
use oomscope_base::shape;
use oomscope_base::size::human;
use oomscope_core::record::Kind;
use oomscope_core::trace::{self, Trace};
use oomscope_format::InputError;
use std::collections::HashMap;
use std::path::Path;

/// The most steps one simulation runs. Every simulated step makes the same requests (a
/// step frees all it made), so a few show all there is; the cap keeps a mistyped `"steps"`
/// from filling the host's memory with identical steps.
pub const MAX_STEPS: u32 = 10_000;

/// The most events (allocations, frees, step marks) one simulation makes: the trace is held
/// in memory for the replay, about 60 bytes an event, so this bounds it near 600 MB.
pub const MAX_EVENTS: usize = 10_000_000;

/// Why a step count is refused; the model parser says it too, naming the line.
pub(crate) fn too_many_steps(steps: u64) -> String {
    format!(
        "{steps} steps is more than the {MAX_STEPS} a simulation runs (every simulated step makes the same \
         requests, so two show what one step leaves behind): give fewer"
    )
}

fn too_many_events(path: &Path, steps: u32, batch: u64, per_step: Option<usize>) -> ExpandError {
    let per_step = per_step.map_or(String::new(), |n| format!("; one step makes {n}"));
    ExpandError::Refused(error(
        path,
        0,
        format!(
            "simulating {steps} step{} at batch {batch} would make more than {MAX_EVENTS} events (allocations and \
             frees{per_step}), the most a simulation holds in memory: simulate fewer steps, or a smaller model",
            if steps == 1 { "" } else { "s" }
        ),
    ))
}

/// Why an expansion failed.
#[derive(Debug)]
pub(crate) enum ExpandError {
    /// The model cannot be simulated at all.
    Refused(InputError),
    /// At this batch a tensor would be larger than a size can count (2^64 bytes), or have a
    /// dimension beyond a signed 64-bit shape: a smaller batch may do.
    TooLarge(InputError),
}

impl ExpandError {
    pub(crate) fn into_error(self) -> InputError {
        match self {
            ExpandError::Refused(e) | ExpandError::TooLarge(e) => e,
        }
    }
}

/// Bytes of a tensor of `shape`, or `None` past `u64::MAX`.
fn tensor_bytes(shape: &[u64], dtype: DType) -> Option<u64> {
    shape.iter().try_fold(dtype.bytes(), |acc, &d| acc.checked_mul(d))
}

/// How one output of a node gets its buffer.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Alloc {
    New,
    /// In place over input `i` when this node is that input's last user.
    Forward(usize),
    /// Always the same buffer as input `i` (a reshape, an identity).
    View(usize),
}

/// What the backward of a node does for one input.
#[derive(Clone, Debug, PartialEq)]
enum InputGrad {
    /// A new gradient tensor, named after the gradient op.
    New(&'static str),
    /// The output's gradient itself (add, bias_add, reshape).
    Pass,
}

#[derive(Clone, Debug)]
struct Node {
    name: String,
    inputs: Vec<usize>,
    outputs: Vec<(usize, Alloc)>,
    /// Tensors the backward needs.
    keep: Vec<usize>,
    weights: Vec<usize>,
    temp: u64,
    /// Per input, when it needs a gradient.
    input_grads: Vec<InputGrad>,
    /// Gradient op name for each weight's gradient.
    weight_grads: Vec<&'static str>,
}

#[derive(Clone, Debug)]
struct Tensor {
    /// NHWC (4-D) or [B, F] (2-D) with the batch first; scalars are `[]`.
    shape: Vec<u64>,
    needs_grad: bool,
}

#[derive(Clone, Debug)]
struct Weight {
    name: String,
    shape: Vec<u64>,
    trainable: bool,
}

struct Graph {
    tensors: Vec<Tensor>,
    nodes: Vec<Node>,
    weights: Vec<Weight>,
    input: usize,
    labels: Option<usize>,
    /// The tensor fetched at the end of a step (the loss, or the last output).
    fetch: usize,
    names: HashMap<String, u32>,
}

impl Graph {
    /// TF's unique naming: a taken name gets `_1`, `_2`, ...
    fn unique(&mut self, name: String) -> String {
        let Some(&last) = self.names.get(&name) else {
            self.names.insert(name.clone(), 0);
            return name;
        };
        let mut n = last;
        let candidate = loop {
            n += 1;
            let candidate = format!("{name}_{n}");
            if !self.names.contains_key(&candidate) {
                break candidate;
            }
        };
        self.names.insert(name, n);
        self.names.insert(candidate.clone(), 0);
        candidate
    }

    fn tensor(&mut self, shape: Vec<u64>, needs_grad: bool) -> usize {
        self.tensors.push(Tensor { shape, needs_grad });
        self.tensors.len() - 1
    }

    fn weight(&mut self, name: String, shape: Vec<u64>, trainable: bool) -> usize {
        let name = self.unique(name);
        self.weights.push(Weight { name, shape, trainable });
        self.weights.len() - 1
    }
}

fn join(parts: &[&str]) -> String {
    parts.iter().filter(|p| !p.is_empty()).copied().collect::<Vec<_>>().join("/")
}

fn error(path: &Path, line: usize, message: String) -> InputError {
    InputError { path: path.to_path_buf(), line, message }
}

/// What to do about a tensor too large to exist, when the batch is in its shape.
const SMALLER: &str = "no device holds it: make the batch, the input shape or the layers smaller";

/// The same for a tensor the batch does not change (a weight, a dimension computed from
/// the sample's shape).
const SMALLER_LAYERS: &str = "no device holds it: make the input shape or the layers smaller";

/// What to say about a tensor that cannot exist: what it is, at what batch (`None` for a
/// weight, which no batch changes), and what to do.
fn too_large(path: &Path, line: usize, what: &str, shape: &[u64], dtype: DType, batch: Option<u64>) -> ExpandError {
    let dims = shape::text(shape);
    let why = if tensor_bytes(shape, dtype).is_none() {
        format!("would take more than {} (2^64 bytes), more than any size can count", human(u64::MAX))
    } else {
        format!("has a dimension above {} (2^63 - 1), the largest a shape holds in TensorFlow and PyTorch", i64::MAX)
    };
    let dtype = dtype.name();
    match batch {
        Some(b) => {
            ExpandError::TooLarge(error(path, line, format!("{what} at batch {b}, {dims} {dtype}, {why}; {SMALLER}")))
        }
        None => ExpandError::Refused(error(path, line, format!("{what}, {dims} {dtype}, {why}; {SMALLER_LAYERS}"))),
    }
}

fn out_size(input: u64, k: u64, stride: u64, padding: Padding) -> Option<u64> {
    match padding {
        Padding::Same => Some(input.div_ceil(stride)),
        Padding::Valid => input.checked_sub(k - 1).filter(|&n| n > 0).map(|n| n.div_ceil(stride)),
    }
}

/// What a node's backward needs besides the output's gradient.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Keep {
    Nothing,
    Input,
    Output,
    Both,
}

/// Builds the graph one layer at a time; knows the model's scope and whether it trains.
struct Builder<'m> {
    g: Graph,
    scope: &'m str,
    train: bool,
    path: &'m Path,
}

impl Builder<'_> {
    fn error(&self, line: usize, message: String) -> ExpandError {
        ExpandError::Refused(error(self.path, line, message))
    }

    /// A dimension computed from others that overflows. Batch sizes do not enter it (the
    /// batch dimension is never computed), so a smaller batch would not do.
    fn overflow(&self, line: usize, what: &str, shape: &[u64]) -> ExpandError {
        self.error(
            line,
            format!(
                "{what} of {}: an output dimension would be more than {} (2^64 - 1); {SMALLER_LAYERS}",
                shape::text(shape),
                u64::MAX
            ),
        )
    }

    fn node(&mut self, n: Node) -> usize {
        let out = n.outputs[0].0;
        self.g.nodes.push(n);
        out
    }

    /// `scope/layer/op`, made unique.
    fn name(&mut self, layer: &str, op: &str) -> String {
        let name = join(&[self.scope, layer, op]);
        self.g.unique(name)
    }

    /// A node with one input, one output of `shape`, and no weights.
    #[allow(clippy::too_many_arguments)]
    fn unary(
        &mut self,
        layer: &str,
        op: &str,
        src: usize,
        shape: Vec<u64>,
        alloc: Alloc,
        keep: Keep,
        grad: InputGrad,
    ) -> usize {
        let needs = self.g.tensors[src].needs_grad;
        let out = self.g.tensor(shape, needs);
        let keep = match (self.train, keep) {
            (false, _) | (_, Keep::Nothing) => vec![],
            (_, Keep::Input) => vec![src],
            (_, Keep::Output) => vec![out],
            (_, Keep::Both) => vec![src, out],
        };
        let name = self.name(layer, op);
        self.node(Node {
            name,
            inputs: vec![src],
            outputs: vec![(out, alloc)],
            keep,
            weights: vec![],
            temp: 0,
            input_grads: vec![grad],
            weight_grads: vec![],
        })
    }

    /// ReLU in place; its gradient reads its output.
    fn relu(&mut self, layer: &str, t: usize) -> usize {
        let shape = self.g.tensors[t].shape.clone();
        self.unary(layer, "Relu", t, shape, Alloc::Forward(0), Keep::Output, InputGrad::New("ReluGrad"))
    }

    /// A bias add in place, with its `bias` weight.
    fn bias_add(&mut self, layer: &str, t: usize, channels: u64) -> usize {
        let bias = self.g.weight(join(&[self.scope, layer, "bias"]), vec![channels], true);
        let out = self.g.tensor(self.g.tensors[t].shape.clone(), true);
        let name = self.name(layer, "BiasAdd");
        self.node(Node {
            name,
            inputs: vec![t],
            outputs: vec![(out, Alloc::Forward(0))],
            keep: vec![],
            weights: vec![bias],
            temp: 0,
            input_grads: vec![InputGrad::Pass],
            weight_grads: vec!["BiasAddGrad"],
        })
    }

    /// Fused batch norm with its four weights; in training it also saves the batch mean and
    /// variance, and its gradient reads its input.
    fn batch_norm(&mut self, layer: &str, t: usize, channels: u64) -> usize {
        let weights: Vec<usize> = [("gamma", true), ("beta", true), ("moving_mean", false), ("moving_variance", false)]
            .iter()
            .map(|(n, trainable)| self.g.weight(join(&[self.scope, layer, n]), vec![channels], *trainable))
            .collect();
        let out = self.g.tensor(self.g.tensors[t].shape.clone(), true);
        let mut outputs = vec![(out, Alloc::New)];
        let mut keep = vec![];
        if self.train {
            let mean = self.g.tensor(vec![channels], false);
            let var = self.g.tensor(vec![channels], false);
            outputs.extend([(mean, Alloc::New), (var, Alloc::New)]);
            keep = vec![t, mean, var];
        }
        let name = self.name(layer, "FusedBatchNorm");
        self.node(Node {
            name,
            inputs: vec![t],
            outputs,
            keep,
            weights: weights[..2].to_vec(),
            temp: 0,
            input_grads: vec![InputGrad::New("FusedBatchNormGrad")],
            weight_grads: vec!["FusedBatchNormGrad", "FusedBatchNormGrad"],
        })
    }

    /// A convolution or matrix product: one weight, the input kept for the weight's gradient.
    #[allow(clippy::too_many_arguments)]
    fn weighted(
        &mut self,
        layer: &str,
        op: &str,
        src: usize,
        shape: Vec<u64>,
        kernel: Vec<u64>,
        grads: [&'static str; 2],
        temp: u64,
    ) -> usize {
        let k = self.g.weight(join(&[self.scope, layer, "kernel"]), kernel, true);
        let out = self.g.tensor(shape, true);
        let name = self.name(layer, op);
        let keep = if self.train { vec![src] } else { vec![] };
        self.node(Node {
            name,
            inputs: vec![src],
            outputs: vec![(out, Alloc::New)],
            keep,
            weights: vec![k],
            temp,
            input_grads: vec![InputGrad::New(grads[0])],
            weight_grads: vec![grads[1]],
        })
    }

    fn shape(&self, t: usize) -> Vec<u64> {
        self.g.tensors[t].shape.clone()
    }

    fn four_d(&self, t: usize, what: &str, line: usize) -> Result<Vec<u64>, ExpandError> {
        let s = self.shape(t);
        if s.len() == 4 {
            Ok(s)
        } else {
            Err(self.error(
                line,
                format!("{what} needs a 4-D input [batch, height, width, channels]; got {}", shape::text(&s)),
            ))
        }
    }

    /// Two loss inputs, the output and the labels, checked against each other.
    fn labels(&self, line: usize, what: &str) -> Result<usize, ExpandError> {
        self.g.labels.ok_or_else(|| self.error(line, format!("{what} needs \"labels\"")))
    }

    /// A node joining several inputs, passing or slicing the gradient back to each.
    fn join_node(
        &mut self,
        layer: &str,
        op: &str,
        ids: Vec<usize>,
        shape: Vec<u64>,
        alloc: Alloc,
        grad: InputGrad,
    ) -> usize {
        let needs = ids.iter().any(|&i| self.g.tensors[i].needs_grad);
        let out = self.g.tensor(shape, needs);
        let name = self.name(layer, op);
        let n = ids.len();
        self.node(Node {
            name,
            inputs: ids,
            outputs: vec![(out, alloc)],
            keep: vec![],
            weights: vec![],
            temp: 0,
            input_grads: vec![grad; n],
            weight_grads: vec![],
        })
    }

    /// Adds one layer reading `src`; returns its output.
    fn layer(&mut self, layer: &Layer, src: usize, by_name: &HashMap<String, usize>) -> Result<usize, ExpandError> {
        let line = layer.line;
        let lname = layer.name.as_deref().unwrap_or("");
        Ok(match &layer.op {
            LayerOp::Conv2d { filters, kernel, stride, padding, bias, batch_norm, relu, workspace } => {
                let s = self.four_d(src, "conv2d", line)?;
                let (Some(h), Some(w)) =
                    (out_size(s[1], kernel[0], *stride, *padding), out_size(s[2], kernel[1], *stride, *padding))
                else {
                    return Err(self.error(
                        line,
                        format!(
                            "conv2d: a {}x{} kernel does not fit the input {} with \"valid\" padding",
                            kernel[0],
                            kernel[1],
                            shape::text(&s)
                        ),
                    ));
                };
                let mut t = self.weighted(
                    lname,
                    "Conv2D",
                    src,
                    vec![s[0], h, w, *filters],
                    vec![kernel[0], kernel[1], s[3], *filters],
                    ["Conv2DBackpropInput", "Conv2DBackpropFilter"],
                    *workspace,
                );
                if *bias {
                    t = self.bias_add(lname, t, *filters);
                }
                if *batch_norm {
                    t = self.batch_norm(lname, t, *filters);
                }
                if *relu {
                    t = self.relu(lname, t);
                }
                t
            }
            LayerOp::Dense { units, bias, relu } => {
                let s = self.shape(src);
                if s.len() != 2 {
                    return Err(self.error(
                        line,
                        format!(
                            "dense needs a 2-D input [batch, features] (add a flatten layer before it); got {}",
                            shape::text(&s)
                        ),
                    ));
                }
                let mut t = self.weighted(
                    lname,
                    "MatMul",
                    src,
                    vec![s[0], *units],
                    vec![s[1], *units],
                    ["MatMul", "MatMul_1"],
                    0,
                );
                if *bias {
                    t = self.bias_add(lname, t, *units);
                }
                if *relu {
                    t = self.relu(lname, t);
                }
                t
            }
            LayerOp::BiasAdd => {
                let c = *self.shape(src).last().unwrap_or(&1);
                self.bias_add(lname, src, c)
            }
            LayerOp::BatchNorm => {
                let c = *self.shape(src).last().unwrap_or(&1);
                self.batch_norm(lname, src, c)
            }
            LayerOp::Relu => self.relu(lname, src),
            LayerOp::Softmax => {
                let s = self.shape(src);
                self.unary(lname, "Softmax", src, s, Alloc::New, Keep::Output, InputGrad::New("mul"))
            }
            LayerOp::Pool { max, size, stride, padding } => {
                let s = self.four_d(src, if *max { "max_pool" } else { "avg_pool" }, line)?;
                let (Some(h), Some(w)) =
                    (out_size(s[1], *size, *stride, *padding), out_size(s[2], *size, *stride, *padding))
                else {
                    return Err(self.error(
                        line,
                        format!("pooling: a {size}x{size} window does not fit the input {}", shape::text(&s)),
                    ));
                };
                let (op, keep, grad) = if *max {
                    ("MaxPool", Keep::Both, "MaxPoolGrad")
                } else {
                    ("AvgPool", Keep::Nothing, "AvgPoolGrad")
                };
                self.unary(lname, op, src, vec![s[0], h, w, s[3]], Alloc::New, keep, InputGrad::New(grad))
            }
            LayerOp::Resize { size, scale, nearest } => {
                let s = self.four_d(src, "resize", line)?;
                let (h, w) = match (size, scale) {
                    (Some([h, w]), _) => (*h, *w),
                    (None, Some(k)) => match (s[1].checked_mul(*k), s[2].checked_mul(*k)) {
                        (Some(h), Some(w)) => (h, w),
                        _ => return Err(self.overflow(line, "resize", &s)),
                    },
                    (None, None) => unreachable!("the parser requires size or scale"),
                };
                // The bilinear gradient takes the original image (TF passes op.inputs[0]).
                let (op, keep, grad) = if *nearest {
                    ("ResizeNearestNeighbor", Keep::Nothing, "ResizeNearestNeighborGrad")
                } else {
                    ("ResizeBilinear", Keep::Input, "ResizeBilinearGrad")
                };
                self.unary(lname, op, src, vec![s[0], h, w, s[3]], Alloc::New, keep, InputGrad::New(grad))
            }
            LayerOp::Add { inputs, relu } => {
                let ids: Vec<usize> = inputs.iter().map(|n| by_name[n]).collect();
                let s0 = self.shape(ids[0]);
                for &i in &ids[1..] {
                    let si = self.shape(i);
                    if si != s0 {
                        return Err(self.error(
                            line,
                            format!("add: inputs have different shapes, {} and {}", shape::text(&s0), shape::text(&si)),
                        ));
                    }
                }
                let t = self.join_node(lname, "add", ids, s0, Alloc::Forward(0), InputGrad::Pass);
                if *relu { self.relu(lname, t) } else { t }
            }
            LayerOp::Concat { inputs } => self.concat(inputs, by_name, line, lname)?,
            LayerOp::Flatten => {
                let s = self.shape(src);
                let Some(features) = s[1..].iter().try_fold(1u64, |acc, &d| acc.checked_mul(d)) else {
                    return Err(self.overflow(line, "flatten", &s));
                };
                self.unary(lname, "Reshape", src, vec![s[0], features], Alloc::View(0), Keep::Nothing, InputGrad::Pass)
            }
            LayerOp::Dropout { .. } if !self.train => {
                // Evaluation: dropout is the identity.
                let s = self.shape(src);
                self.unary(lname, "dropout/Identity", src, s, Alloc::View(0), Keep::Nothing, InputGrad::Pass)
            }
            LayerOp::Dropout { .. } => self.dropout(src, lname)?,
            LayerOp::SoftmaxCrossEntropy => self.softmax_cross_entropy(src, line, lname)?,
            LayerOp::L2Loss => self.l2_loss(src, line, lname)?,
        })
    }

    fn concat(
        &mut self,
        inputs: &[String],
        by_name: &HashMap<String, usize>,
        line: usize,
        lname: &str,
    ) -> Result<usize, ExpandError> {
        let ids: Vec<usize> = inputs.iter().map(|n| by_name[n]).collect();
        let s0 = self.four_d(ids[0], "concat", line)?;
        let mut channels = 0u64;
        for &i in &ids {
            let si = self.four_d(i, "concat", line)?;
            if si[..3] != s0[..3] {
                return Err(self.error(
                    line,
                    format!(
                        "concat: inputs differ in batch, height or width: {} and {}",
                        shape::text(&s0),
                        shape::text(&si)
                    ),
                ));
            }
            channels = match channels.checked_add(si[3]) {
                Some(c) => c,
                None => return Err(self.overflow(line, "concat", &si)),
            };
        }
        Ok(self.join_node(
            lname,
            "concat",
            ids,
            vec![s0[0], s0[1], s0[2], channels],
            Alloc::New,
            InputGrad::New("Slice"),
        ))
    }

    fn dropout(&mut self, src: usize, lname: &str) -> Result<usize, ExpandError> {
        // The mask, kept for the gradient; then the masked output.
        let s = self.shape(src);
        let mask = self.g.tensor(s.clone(), false);
        let mask_name = self.name(lname, "dropout/Floor");
        self.node(Node {
            name: mask_name,
            inputs: vec![],
            outputs: vec![(mask, Alloc::New)],
            keep: vec![],
            weights: vec![],
            temp: 0,
            input_grads: vec![],
            weight_grads: vec![],
        });
        let needs = self.g.tensors[src].needs_grad;
        let out = self.g.tensor(s, needs);
        let name = self.name(lname, "dropout/mul");
        Ok(self.node(Node {
            name,
            inputs: vec![src, mask],
            outputs: vec![(out, Alloc::New)],
            keep: vec![mask],
            weights: vec![],
            temp: 0,
            input_grads: vec![InputGrad::New("Mul"), InputGrad::Pass],
            weight_grads: vec![],
        }))
    }

    fn softmax_cross_entropy(&mut self, src: usize, line: usize, lname: &str) -> Result<usize, ExpandError> {
        let s = self.shape(src);
        let labels = self.labels(line, "softmax_cross_entropy")?;
        let ls = self.shape(labels);
        if s.len() != 2 || ls != s {
            return Err(self.error(
                line,
                format!(
                    "softmax_cross_entropy needs logits [batch, classes] shaped like the labels; got {} and labels {}",
                    shape::text(&s),
                    shape::text(&ls)
                ),
            ));
        }
        let loss = self.g.tensor(vec![s[0]], true);
        let backprop = self.g.tensor(s, false);
        let name = self.name(lname, "SoftmaxCrossEntropyWithLogits");
        let keep = if self.train { vec![backprop] } else { vec![] };
        Ok(self.node(Node {
            name,
            inputs: vec![src, labels],
            outputs: vec![(loss, Alloc::New), (backprop, Alloc::New)],
            keep,
            weights: vec![],
            temp: 0,
            input_grads: vec![InputGrad::New("mul"), InputGrad::Pass],
            weight_grads: vec![],
        }))
    }

    fn l2_loss(&mut self, src: usize, line: usize, lname: &str) -> Result<usize, ExpandError> {
        let s = self.shape(src);
        let labels = self.labels(line, "l2_loss")?;
        let ls = self.shape(labels);
        if ls != s {
            return Err(self.error(
                line,
                format!("l2_loss: the output {} and the labels {} differ in shape", shape::text(&s), shape::text(&ls)),
            ));
        }
        let diff = self.g.tensor(s, true);
        let name = self.name(lname, "SquaredDifference");
        let keep = if self.train { vec![src, labels] } else { vec![] };
        Ok(self.node(Node {
            name,
            inputs: vec![src, labels],
            outputs: vec![(diff, Alloc::New)],
            keep,
            weights: vec![],
            temp: 0,
            input_grads: vec![InputGrad::New("mul"), InputGrad::Pass],
            weight_grads: vec![],
        }))
    }
}

/// Builds the node graph of `model` at `batch`. Each layer's tensors and weights are checked
/// as it is added, so the first layer at fault is the one named.
fn build(model: &Model, batch: u64, path: &Path) -> Result<Graph, ExpandError> {
    let g = Graph {
        tensors: Vec::new(),
        nodes: Vec::new(),
        weights: Vec::new(),
        input: 0,
        labels: None,
        fetch: 0,
        names: HashMap::new(),
    };
    let mut b = Builder { g, scope: &model.scope, train: model.mode == Mode::Train, path };
    let check = |shape: &[u64], line: usize, batched: bool, what: &dyn Fn() -> String| -> Result<(), ExpandError> {
        match tensor_bytes(shape, model.dtype) {
            Some(_) if shape.iter().all(|&d| i64::try_from(d).is_ok()) => Ok(()),
            _ => Err(too_large(path, line, &what(), shape, model.dtype, batched.then_some(batch))),
        }
    };
    let mut input_shape = vec![batch];
    input_shape.extend(&model.input);
    check(&input_shape, model.input_line, true, &|| format!("the input ({:?})", model.input_name))?;
    b.g.input = b.g.tensor(input_shape, false);
    if let Some(l) = &model.labels {
        let mut labels = vec![batch];
        labels.extend(l);
        check(&labels, model.labels_line, true, &|| format!("the labels ({:?})", model.labels_name))?;
        b.g.labels = Some(b.g.tensor(labels, false));
    }
    let mut by_name: HashMap<String, usize> = HashMap::from([(model.input_name.clone(), b.g.input)]);
    let mut current = b.g.input;
    for layer in &model.layers {
        let src = match &layer.input {
            Some(n) => by_name[n],
            None => current,
        };
        let (nodes, weights) = (b.g.nodes.len(), b.g.weights.len());
        let out = b.layer(layer, src, &by_name)?;
        for w in &b.g.weights[weights..] {
            check(&w.shape, layer.line, false, &|| format!("the weight {}", w.name))?;
        }
        for n in &b.g.nodes[nodes..] {
            for &(t, _) in &n.outputs {
                // Every output but batch norm's statistics ([channels]) leads with the batch.
                let batched = b.g.tensors[t].shape.first() == Some(&batch);
                check(&b.g.tensors[t].shape, layer.line, batched, &|| format!("the output of {}", n.name))?;
            }
        }
        if let Some(n) = &layer.name {
            by_name.insert(n.clone(), out);
        }
        current = out;
    }
    b.g.fetch = current;
    // Only building needs the table of names taken; a deep model's is large.
    b.g.names = HashMap::new();
    Ok(b.g)
}

/// Emits the trace's events: buffers with reference counts, freed at zero.
struct Out<'m> {
    trace: trace::Builder,
    model: &'m Model,
    /// Buffers: (allocation number, references).
    buffers: Vec<(u32, u32)>,
    /// Buffers with references left: counted as they go, where counting them each step
    /// made a long run quadratic.
    live: usize,
}

impl Out<'_> {
    fn shape_for_report(&self, shape: &[u64], activation: bool) -> Vec<i64> {
        let shape: Vec<i64> = shape.iter().map(|&d| i64::try_from(d).unwrap_or(i64::MAX)).collect();
        if activation && shape.len() == 4 && self.model.data_format == DataFormat::Nchw {
            vec![shape[0], shape[3], shape[1], shape[2]]
        } else {
            shape
        }
    }

    /// A new buffer with one reference; returns its index.
    fn alloc(&mut self, op: &str, shape: &[u64], kind: Kind, outside: bool) -> usize {
        // Every shape was checked when the graph was built: nothing saturates here.
        let bytes = tensor_bytes(shape, self.model.dtype).unwrap_or(u64::MAX);
        let shown = self
            .shape_for_report(shape, matches!(kind, Kind::Activation | Kind::Backward | Kind::Gradient | Kind::Input));
        let alloc = self.trace.alloc(bytes, op, Some(&shown), Some(self.model.dtype.name()), kind, outside);
        self.buffers.push((alloc, 1));
        self.live += 1;
        self.buffers.len() - 1
    }

    fn retain(&mut self, buf: usize) {
        self.buffers[buf].1 += 1;
    }

    fn release(&mut self, buf: usize) {
        let b = &mut self.buffers[buf];
        b.1 -= 1;
        if b.1 == 0 {
            let alloc = b.0;
            self.live -= 1;
            self.trace.free(alloc);
        }
    }

    fn live_buffers(&self) -> usize {
        self.live
    }
}

/// One step's backward pass: each node's input gradients (passed on, or new, summed by
/// AddN where a tensor has several users), its weights' gradients (applied as soon as they
/// exist), and what it kept for the backward released. `(path, steps, batch)` name the
/// refusal when the events would pass their bound.
fn backward(
    out: &mut Out<'_>,
    g: &Graph,
    uses: &mut [u32],
    buf: &[Option<usize>],
    (path, steps, batch): (&Path, u32, u64),
) -> Result<(), ExpandError> {
    // grad[t]: a buffer holding one reference to the gradient of tensor t.
    let mut grad: Vec<Option<usize>> = vec![None; g.tensors.len()];
    grad[g.fetch] = Some(out.alloc("gradients/Fill", &[], Kind::Backward, false));
    let mut addn = 0u32;
    for n in g.nodes.iter().rev() {
        if out.trace.len() > MAX_EVENTS {
            return Err(too_many_events(path, steps, batch, None));
        }
        let g_out = grad[n.outputs[0].0].take();
        if let Some(go) = g_out {
            let mut input_grads = Vec::with_capacity(n.inputs.len());
            for (k, &i) in n.inputs.iter().enumerate() {
                if !g.tensors[i].needs_grad {
                    continue;
                }
                let gb = match &n.input_grads[k] {
                    InputGrad::Pass => {
                        out.retain(go);
                        go
                    }
                    InputGrad::New(op) => {
                        let name = format!("gradients/{}_grad/{op}", n.name);
                        out.alloc(&name, &g.tensors[i].shape, Kind::Backward, false)
                    }
                };
                input_grads.push((i, gb));
            }
            for (&w, op) in n.weights.iter().zip(&n.weight_grads) {
                let name = format!("gradients/{}_grad/{op}", n.name);
                // Applied by the optimizer as soon as it exists, then freed.
                let wb = out.alloc(&name, &g.weights[w].shape, Kind::Gradient, false);
                out.release(wb);
            }
            out.release(go);
            for (i, gb) in input_grads {
                grad[i] = Some(match grad[i].take() {
                    None => gb,
                    Some(prev) => {
                        let name =
                            if addn == 0 { "gradients/AddN".to_string() } else { format!("gradients/AddN_{addn}") };
                        addn += 1;
                        let sum = out.alloc(&name, &g.tensors[i].shape, Kind::Backward, false);
                        out.release(prev);
                        out.release(gb);
                        sum
                    }
                });
            }
        }
        for &k in &n.keep {
            consume(out, uses, buf, k);
        }
    }
    for gb in grad.into_iter().flatten() {
        out.release(gb); // gradients of the input: nothing reads them
    }
    Ok(())
}

/// A tensor gives up one use; at zero its buffer reference goes.
fn consume(out: &mut Out<'_>, uses: &mut [u32], buf: &[Option<usize>], t: usize) {
    uses[t] -= 1;
    if uses[t] == 0
        && let Some(b) = buf[t]
    {
        out.release(b);
    }
}

/// A trace of `model` run at `batch` for `steps` steps.
pub fn expand(model: &Model, batch: u64, steps: u32, path: &Path) -> Result<Trace, InputError> {
    try_expand(model, batch, steps, path).map_err(ExpandError::into_error)
}

/// [`expand`], telling a batch too large to count apart from a model that cannot run.
pub(crate) fn try_expand(model: &Model, batch: u64, steps: u32, path: &Path) -> Result<Trace, ExpandError> {
    if steps > MAX_STEPS {
        return Err(ExpandError::Refused(error(path, 0, too_many_steps(u64::from(steps)))));
    }
    let g = build(model, batch, path)?;
    let train = model.mode == Mode::Train;
    let mut out = Out { trace: trace::Builder::new(), model, buffers: Vec::new(), live: 0 };
    out.trace.step(-1);
    // Weights in creation order, then the optimizer's slots per trainable weight.
    for w in &g.weights {
        out.alloc(&w.name, &w.shape, Kind::Weight, false);
    }
    let slots = super::model::slots(model.optimizer);
    for w in g.weights.iter().filter(|w| w.trainable) {
        for slot in slots {
            out.alloc(&format!("{}/{slot}", w.name), &w.shape, Kind::Optimizer, false);
        }
    }
    let weights_live = out.live_buffers();

    // Uses of each tensor: forward users, backward keepers, and the fetch at the end.
    let mut uses_total = vec![0u32; g.tensors.len()];
    for n in &g.nodes {
        for &i in &n.inputs {
            uses_total[i] += 1;
        }
        if train {
            for &k in &n.keep {
                uses_total[k] += 1;
            }
        }
    }
    uses_total[g.fetch] += 1;
    if let Some(l) = g.labels {
        uses_total[l] += 1; // fed for the whole step (the loss or the accuracy reads it)
    }

    let setup = out.trace.len();
    for step in 0..steps {
        if step == 1 {
            // Every step makes what step 0 made: the whole trace's size is known now.
            let per_step = out.trace.len() - setup;
            if setup + per_step.saturating_mul(steps as usize) > MAX_EVENTS {
                return Err(too_many_events(path, steps, batch, Some(per_step)));
            }
        }
        out.trace.step(i64::from(step));
        let mut uses = uses_total.clone();
        let mut buf: Vec<Option<usize>> = vec![None; g.tensors.len()];
        buf[g.input] = Some(out.alloc(&model.input_name, &g.tensors[g.input].shape, Kind::Input, false));
        if let Some(l) = g.labels {
            buf[l] = Some(out.alloc(&model.labels_name, &g.tensors[l].shape, Kind::Input, false));
        }
        if step == 0 {
            for o in &model.outside {
                // Taken once, for the session, like a cuDNN handle.
                out.trace.alloc(o.bytes, &o.op, None, None, Kind::Temporary, true);
            }
        }
        for n in &g.nodes {
            if out.trace.len() > MAX_EVENTS {
                return Err(too_many_events(path, steps, batch, None));
            }
            if n.temp > 0 {
                let b = out.alloc(
                    &format!("{}/workspace", n.name),
                    &[n.temp / model.dtype.bytes().max(1)],
                    Kind::Temporary,
                    false,
                );
                out.release(b);
            }
            for &(t, how) in &n.outputs {
                let b = match how {
                    Alloc::View(i) => {
                        let b = buf[n.inputs[i]].expect("input computed");
                        out.retain(b);
                        b
                    }
                    Alloc::Forward(i) if uses[n.inputs[i]] == 1 => {
                        let b = buf[n.inputs[i]].expect("input computed");
                        out.retain(b);
                        b
                    }
                    Alloc::Forward(_) | Alloc::New => out.alloc(&n.name, &g.tensors[t].shape, Kind::Activation, false),
                };
                buf[t] = Some(b);
            }
            for &i in &n.inputs {
                consume(&mut out, &mut uses, &buf, i);
            }
            for &(t, _) in &n.outputs {
                if uses[t] == 0 {
                    out.release(buf[t].expect("just made"));
                }
            }
        }
        if train {
            backward(&mut out, &g, &mut uses, &buf, (path, steps, batch))?;
        }
        consume(&mut out, &mut uses, &buf, g.fetch);
        if let Some(l) = g.labels {
            consume(&mut out, &mut uses, &buf, l);
        }
        debug_assert!(uses.iter().all(|&u| u == 0), "every use was consumed");
        debug_assert_eq!(out.live_buffers(), weights_live, "only weights and slots outlive a step");
    }
    Ok(out.trace.finish())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workload::model;
    use oomscope_ingest::trace;

    fn model(text: &str) -> Model {
        model::parse(Path::new("m.json"), text).unwrap()
    }

    /// Live bytes after each event, from the trace itself.
    fn live_curve(jsonl: &str) -> (u64, Vec<(String, u64)>) {
        let t = trace::parse_str(Path::new("t"), jsonl).unwrap();
        let mut sizes = HashMap::new();
        let (mut live, mut peak) = (0u64, 0u64);
        let mut at_peak = Vec::new();
        let mut names: HashMap<u32, (String, u64)> = HashMap::new();
        for e in &t.events {
            match *e {
                trace::Event::Alloc { alloc, bytes, meta, outside: false } => {
                    sizes.insert(alloc, bytes);
                    names.insert(alloc, (t.names.op(meta.op).to_string(), bytes));
                    live += bytes;
                    if live > peak {
                        peak = live;
                        at_peak = names.values().cloned().collect();
                    }
                }
                trace::Event::Free { alloc, .. } => {
                    live -= sizes.remove(&alloc).unwrap_or(0);
                    names.remove(&alloc);
                }
                _ => {}
            }
        }
        at_peak.sort();
        (peak, at_peak)
    }

    #[test]
    fn evaluation_frees_each_tensor_after_its_last_user() {
        // conv (4x4x8 per sample = 512 B) -> relu in place -> pool (2x2x8 = 128 B).
        let m = model(
            r#"{"input": [4, 4, 1], "batch": 1, "mode": "eval", "layers": [
                {"op": "conv2d", "filters": 8, "kernel": 3, "bias": false, "activation": "relu"},
                {"op": "max_pool"}]}"#,
        );
        let jsonl = trace::to_jsonl(&expand(&m, 1, 1, Path::new("m.json")).unwrap());
        assert!(jsonl.contains("\"op\":\"Conv2D\""));
        assert!(!jsonl.contains("\"op\":\"Relu\""), "relu works in place: {jsonl}");
        let (peak, _) = live_curve(&jsonl);
        // kernel 3*3*1*8*4 = 288, input 64, conv 512, pool 128: the input is freed after
        // the conv, the conv output after the pool.
        assert_eq!(peak, 288 + 512 + 128);
    }

    #[test]
    fn training_keeps_what_backward_needs() {
        let m = model(
            r#"{"input": [4, 4, 1], "labels": [4, 4, 8], "batch": 2, "mode": "train", "optimizer": "adam", "layers": [
                {"op": "conv2d", "name": "c", "filters": 8, "kernel": 1, "bias": false},
                {"op": "conv2d", "name": "d", "filters": 8, "kernel": 1, "bias": false},
                {"op": "l2_loss"}]}"#,
        );
        let jsonl = trace::to_jsonl(&expand(&m, 2, 1, Path::new("m.json")).unwrap());
        // Each weight has two Adam slots; the first conv needs no input gradient.
        assert!(jsonl.contains("\"op\":\"c/kernel/Adam_1\""));
        assert!(jsonl.contains("\"op\":\"gradients/d/Conv2D_grad/Conv2DBackpropInput\""));
        assert!(!jsonl.contains("gradients/c/Conv2D_grad/Conv2DBackpropInput"), "no gradient for the input data");
        assert!(jsonl.contains("\"op\":\"gradients/c/Conv2D_grad/Conv2DBackpropFilter\""));
        let t = trace::parse_str(Path::new("t"), &jsonl).unwrap();
        assert!(t.events.iter().all(|e| !matches!(e, trace::Event::Alloc { bytes: 0, .. })));
    }

    #[test]
    fn skip_connections_sum_their_gradients() {
        let m = model(
            r#"{"input": [4, 4, 2], "labels": [4, 4, 2], "batch": 1, "optimizer": "sgd", "layers": [
                {"op": "conv2d", "name": "a", "filters": 2, "kernel": 1},
                {"op": "conv2d", "name": "b", "filters": 2, "kernel": 1},
                {"op": "add", "inputs": ["a", "b"], "activation": "relu"},
                {"op": "l2_loss"}]}"#,
        );
        let jsonl = trace::to_jsonl(&expand(&m, 1, 2, Path::new("m.json")).unwrap());
        assert!(jsonl.contains("\"op\":\"gradients/AddN\""), "a's gradient from b and from add is summed");
        assert_eq!(jsonl.matches("\"ev\":\"step\"").count(), 3, "setup and two steps");
    }

    #[test]
    fn the_file_form_reads_back_as_the_same_trace() {
        let m = model(
            r#"{"input": [4, 4, 1], "labels": [4, 4, 8], "batch": 2, "mode": "train", "optimizer": "adam", "outside": [{"op": "cudnn", "bytes": 1024}], "layers": [
                {"op": "conv2d", "name": "c", "filters": 8, "kernel": 1, "bias": false},
                {"op": "l2_loss"}]}"#,
        );
        let built = expand(&m, 2, 2, Path::new("m.json")).unwrap();
        let read = trace::parse_str(Path::new("t"), &trace::to_jsonl(&built)).unwrap();
        assert_eq!(read.events.len(), built.events.len());
        for (a, b) in read.events.iter().zip(&built.events) {
            match (a, b) {
                (
                    trace::Event::Alloc { alloc: na, bytes: ba, meta: ma, outside: oa },
                    trace::Event::Alloc { alloc: nb, bytes: bb, meta: mb, outside: ob },
                ) => {
                    assert_eq!(read.names.op(ma.op), built.names.op(mb.op));
                    assert_eq!(read.names.shapes.get(ma.shape), built.names.shapes.get(mb.shape));
                    assert_eq!(read.names.dtypes.get(ma.dtype), built.names.dtypes.get(mb.dtype));
                    assert_eq!((ma.step, ma.kind), (mb.step, mb.kind));
                    assert_eq!((na, ba, oa), (nb, bb, ob));
                }
                _ => assert_eq!(a, b),
            }
        }
        assert!(read.events.iter().any(|e| matches!(e, trace::Event::Alloc { outside: true, .. })));
    }

    fn too_large(text: &str, batch: u64) -> String {
        let m = model(text);
        match try_expand(&m, batch, 1, Path::new("m.json")) {
            Err(ExpandError::TooLarge(e)) => e.to_string(),
            Err(ExpandError::Refused(e)) => panic!("refused, not too large: {e}"),
            Ok(t) => panic!("expanded to {} events", t.events.len()),
        }
    }

    #[test]
    fn sizes_past_u64_are_refused_naming_the_line_not_wrapped() {
        // 2^32 * 2^32 * 16 * 4 bytes: 2^70, which wrapped to a few bytes.
        let e = too_large(
            "{\"input\": [4294967296, 4294967296, 16],\n\"batch\": 1, \"mode\": \"eval\", \"layers\": [{\"op\": \"relu\"}]}",
            1,
        );
        assert!(
            e.starts_with("m.json:1: the input (\"input\") at batch 1, [1,4294967296,4294967296,16] float32"),
            "{e}"
        );
        assert!(e.contains("more than 16.00EiB (2^64 bytes)") && e.contains("make the batch"), "{e}");

        // A batch that only overflows with the layers' shapes: the conv's output, line 3.
        let text = "{\"input\": [1024, 1024, 1], \"batch\": 1, \"mode\": \"eval\", \"layers\": [\n  {\"op\": \"relu\"},\n  {\"op\": \"conv2d\", \"name\": \"c\", \"filters\": 1048576, \"bias\": false}\n]}";
        let e = too_large(text, 1 << 24);
        assert!(
            e.starts_with("m.json:3: the output of c/Conv2D at batch 16777216, [16777216,1024,1024,1048576]"),
            "{e}"
        );
        assert!(expand(&model(text), 1, 1, Path::new("m.json")).is_ok(), "batch 1 is fine");

        // The batch itself: 2^64 - 1 samples of 48 bytes.
        let e = too_large(
            "{\"input\": [4, 3], \"batch\": 1, \"mode\": \"eval\", \"layers\": [{\"op\": \"relu\"}]}",
            u64::MAX,
        );
        assert!(e.contains("at batch 18446744073709551615"), "{e}");

        // A dimension no signed shape holds, although its bytes would fit.
        let e = too_large(
            "{\"input\": [1], \"dtype\": \"uint8\", \"batch\": 1, \"mode\": \"eval\", \"layers\": [{\"op\": \"relu\"}]}",
            u64::MAX,
        );
        assert!(e.contains("a dimension above 9223372036854775807"), "{e}");

        // Dimensions computed from the sample's shape (4 x 2^62 rows, 4 x 2^62 channels) and
        // weights: no batch changes them, so they are refused outright.
        for (input, layers, expected) in [
            ("[4, 1, 1]", "{\"op\": \"resize\", \"scale\": 4611686018427387904}", "m.json:2: resize of [1,4,1,1]"),
            (
                "[1, 1, 4611686018427387904]",
                "{\"op\": \"concat\", \"inputs\": [\"input\", \"input\", \"input\", \"input\"]}",
                "m.json:2: concat of [1,1,1,4611686018427387904]",
            ),
            (
                "[1, 1, 4294967296]",
                "{\"op\": \"conv2d\", \"name\": \"c\", \"filters\": 4294967296}",
                "m.json:2: the weight c/kernel, [3,3,4294967296,4294967296] uint8, would take more than 16.00EiB",
            ),
        ] {
            let text = format!(
                "{{\"input\": {input}, \"dtype\": \"uint8\", \"batch\": 1, \"mode\": \"eval\",\n\"layers\": [{layers}]}}"
            );
            let e = match try_expand(&model(&text), 1, 1, Path::new("m.json")) {
                Err(ExpandError::Refused(e)) => e.to_string(),
                Err(ExpandError::TooLarge(e)) => panic!("too large at this batch, not refused: {e}"),
                Ok(_) => panic!("{layers} expanded"),
            };
            assert!(e.starts_with(expected) && e.ends_with("make the input shape or the layers smaller"), "{e}");
        }
    }

    #[test]
    fn steps_and_events_are_bounded_before_the_trace_is_made() {
        let text = |steps: u64| {
            format!(
                "{{\"input\": [4], \"batch\": 1, \"mode\": \"eval\",\n\"steps\": {steps},\n\"layers\": [{{\"op\": \"relu\"}}]}}"
            )
        };
        let e = model::parse(Path::new("m.json"), &text(1_000_000_000)).unwrap_err().to_string();
        assert!(e.starts_with("m.json:2: \"steps\": 1000000000 steps is more than the 10000"), "{e}");
        let m = model(&text(MAX_STEPS as u64));
        let e = expand(&m, 1, MAX_STEPS + 1, Path::new("m.json")).unwrap_err().to_string();
        assert!(e.starts_with("m.json: 10001 steps is more than the 10000"), "{e}");

        // 1000 convolutions make 2003 events a step: 10 000 steps would pass the bound,
        // which is known, and refused, after the first step.
        let layers = vec!["{\"op\": \"conv2d\", \"filters\": 1, \"kernel\": 1, \"bias\": false}"; 1000].join(",");
        let m = model(&format!("{{\"input\": [1, 1, 1], \"batch\": 1, \"mode\": \"eval\", \"layers\": [{layers}]}}"));
        let e = expand(&m, 1, MAX_STEPS, Path::new("m.json")).unwrap_err().to_string();
        assert!(e.contains("would make more than 10000000 events") && e.contains("one step makes 2003"), "{e}");
        assert_eq!(expand(&m, 1, 100, Path::new("m.json")).unwrap().events.len(), 1001 + 100 * 2003);
    }

    #[test]
    fn shape_errors_name_the_layer_line() {
        let m = model(
            "{\"input\": [4, 4, 2], \"batch\": 1, \"mode\": \"eval\", \"layers\": [\n  {\"op\": \"conv2d\", \"name\": \"a\", \"filters\": 3},\n  {\"op\": \"add\", \"inputs\": [\"input\", \"a\"]}\n]}",
        );
        let e = expand(&m, 1, 1, Path::new("m.json")).unwrap_err().to_string();
        assert_eq!(e, "m.json:3: add: inputs have different shapes, [1,4,4,2] and [1,4,4,3]");
        let m = model(
            "{\"input\": [4, 4, 2], \"batch\": 1, \"mode\": \"eval\", \"layers\": [\n  {\"op\": \"dense\", \"units\": 3}\n]}",
        );
        let e = expand(&m, 1, 1, Path::new("m.json")).unwrap_err().to_string();
        assert!(e.starts_with("m.json:2: dense needs a 2-D input"), "{e}");
    }
}
