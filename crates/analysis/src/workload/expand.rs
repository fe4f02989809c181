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

use super::model::{DataFormat, Layer, LayerOp, Mode, Model, ModelError, Padding};
use crate::trace::{self, Trace};
use oomscope_base::shape;
use oomscope_core::record::Kind;
use std::collections::HashMap;
use std::path::Path;

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

fn error(path: &Path, line: usize, message: String) -> ModelError {
    ModelError { path: path.to_path_buf(), line, message }
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
    fn error(&self, line: usize, message: String) -> ModelError {
        error(self.path, line, message)
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

    fn four_d(&self, t: usize, what: &str, line: usize) -> Result<Vec<u64>, ModelError> {
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
    fn labels(&self, line: usize, what: &str) -> Result<usize, ModelError> {
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
    fn layer(&mut self, layer: &Layer, src: usize, by_name: &HashMap<String, usize>) -> Result<usize, ModelError> {
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
                    (None, Some(k)) => (s[1] * k, s[2] * k),
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
            LayerOp::Concat { inputs } => {
                let ids: Vec<usize> = inputs.iter().map(|n| by_name[n]).collect();
                let s0 = self.four_d(ids[0], "concat", line)?;
                let mut channels = 0;
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
                    channels += si[3];
                }
                self.join_node(
                    lname,
                    "concat",
                    ids,
                    vec![s0[0], s0[1], s0[2], channels],
                    Alloc::New,
                    InputGrad::New("Slice"),
                )
            }
            LayerOp::Flatten => {
                let s = self.shape(src);
                self.unary(
                    lname,
                    "Reshape",
                    src,
                    vec![s[0], s[1..].iter().product()],
                    Alloc::View(0),
                    Keep::Nothing,
                    InputGrad::Pass,
                )
            }
            LayerOp::Dropout { .. } if !self.train => {
                // Evaluation: dropout is the identity.
                let s = self.shape(src);
                self.unary(lname, "dropout/Identity", src, s, Alloc::View(0), Keep::Nothing, InputGrad::Pass)
            }
            LayerOp::Dropout { .. } => {
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
                self.node(Node {
                    name,
                    inputs: vec![src, mask],
                    outputs: vec![(out, Alloc::New)],
                    keep: vec![mask],
                    weights: vec![],
                    temp: 0,
                    input_grads: vec![InputGrad::New("Mul"), InputGrad::Pass],
                    weight_grads: vec![],
                })
            }
            LayerOp::SoftmaxCrossEntropy => {
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
                self.node(Node {
                    name,
                    inputs: vec![src, labels],
                    outputs: vec![(loss, Alloc::New), (backprop, Alloc::New)],
                    keep,
                    weights: vec![],
                    temp: 0,
                    input_grads: vec![InputGrad::New("mul"), InputGrad::Pass],
                    weight_grads: vec![],
                })
            }
            LayerOp::L2Loss => {
                let s = self.shape(src);
                let labels = self.labels(line, "l2_loss")?;
                let ls = self.shape(labels);
                if ls != s {
                    return Err(self.error(
                        line,
                        format!(
                            "l2_loss: the output {} and the labels {} differ in shape",
                            shape::text(&s),
                            shape::text(&ls)
                        ),
                    ));
                }
                let diff = self.g.tensor(s, true);
                let name = self.name(lname, "SquaredDifference");
                let keep = if self.train { vec![src, labels] } else { vec![] };
                self.node(Node {
                    name,
                    inputs: vec![src, labels],
                    outputs: vec![(diff, Alloc::New)],
                    keep,
                    weights: vec![],
                    temp: 0,
                    input_grads: vec![InputGrad::New("mul"), InputGrad::Pass],
                    weight_grads: vec![],
                })
            }
        })
    }
}

/// Builds the node graph of `model` at `batch`.
fn build(model: &Model, batch: u64, path: &Path) -> Result<Graph, ModelError> {
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
    let mut input_shape = vec![batch];
    input_shape.extend(&model.input);
    b.g.input = b.g.tensor(input_shape, false);
    b.g.labels = model.labels.as_ref().map(|l| {
        let mut s = vec![batch];
        s.extend(l);
        b.g.tensor(s, false)
    });
    let mut by_name: HashMap<String, usize> = HashMap::from([(model.input_name.clone(), b.g.input)]);
    let mut current = b.g.input;
    for layer in &model.layers {
        let src = match &layer.input {
            Some(n) => by_name[n],
            None => current,
        };
        let out = b.layer(layer, src, &by_name)?;
        if let Some(n) = &layer.name {
            by_name.insert(n.clone(), out);
        }
        current = out;
    }
    b.g.fetch = current;
    Ok(b.g)
}

/// Emits the trace's events: buffers with reference counts, freed at zero.
struct Out<'m> {
    trace: trace::Builder,
    model: &'m Model,
    /// Buffers: (allocation number, references).
    buffers: Vec<(u32, u32)>,
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
        let bytes = shape.iter().product::<u64>() * self.model.dtype.bytes();
        let shown = self.shape_for_report(shape, matches!(kind, Kind::Activation | Kind::Gradient | Kind::Input));
        let alloc = self.trace.alloc(bytes, op, Some(&shown), Some(self.model.dtype.name()), kind, outside);
        self.buffers.push((alloc, 1));
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
            self.trace.free(alloc);
        }
    }

    fn live_buffers(&self) -> usize {
        self.buffers.iter().filter(|b| b.1 > 0).count()
    }
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
pub fn expand(model: &Model, batch: u64, steps: u32, path: &Path) -> Result<Trace, ModelError> {
    let g = build(model, batch, path)?;
    let train = model.mode == Mode::Train;
    let mut out = Out { trace: trace::Builder::new(), model, buffers: Vec::new() };
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

    for step in 0..steps {
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
            // grad[t]: a buffer holding one reference to the gradient of tensor t.
            let mut grad: Vec<Option<usize>> = vec![None; g.tensors.len()];
            grad[g.fetch] = Some(out.alloc("gradients/Fill", &[], Kind::Gradient, false));
            let mut addn = 0u32;
            for n in g.nodes.iter().rev() {
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
                                out.alloc(&name, &g.tensors[i].shape, Kind::Gradient, false)
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
                                let name = if addn == 0 {
                                    "gradients/AddN".to_string()
                                } else {
                                    format!("gradients/AddN_{addn}")
                                };
                                addn += 1;
                                let sum = out.alloc(&name, &g.tensors[i].shape, Kind::Gradient, false);
                                out.release(prev);
                                out.release(gb);
                                sum
                            }
                        });
                    }
                }
                for &k in &n.keep {
                    consume(&mut out, &mut uses, &buf, k);
                }
            }
            for gb in grad.into_iter().flatten() {
                out.release(gb); // gradients of the input: nothing reads them
            }
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
    use crate::trace;
    use crate::workload::model;

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
