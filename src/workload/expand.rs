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
use crate::record::Kind;
use std::collections::HashMap;
use std::fmt::Write;
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

fn show(shape: &[u64]) -> String {
    format!("[{}]", shape.iter().map(u64::to_string).collect::<Vec<_>>().join(","))
}

fn out_size(input: u64, k: u64, stride: u64, padding: Padding) -> Option<u64> {
    match padding {
        Padding::Same => Some(input.div_ceil(stride)),
        Padding::Valid => input.checked_sub(k - 1).filter(|&n| n > 0).map(|n| n.div_ceil(stride)),
    }
}

/// Builds the node graph of `model` at `batch`.
fn build(model: &Model, batch: u64, path: &Path) -> Result<Graph, ModelError> {
    let mut g = Graph {
        tensors: Vec::new(),
        nodes: Vec::new(),
        weights: Vec::new(),
        input: 0,
        labels: None,
        fetch: 0,
        names: HashMap::new(),
    };
    let train = model.mode == Mode::Train;
    let mut input_shape = vec![batch];
    input_shape.extend(&model.input);
    g.input = g.tensor(input_shape, false);
    g.labels = model.labels.as_ref().map(|l| {
        let mut s = vec![batch];
        s.extend(l);
        g.tensor(s, false)
    });
    let mut by_name: HashMap<String, usize> = HashMap::from([(model.input_name.clone(), g.input)]);
    let mut current = g.input;
    let scope = model.scope.as_str();
    for layer in &model.layers {
        let Layer { op, name, input, line } = layer;
        let line = *line;
        let lname = name.as_deref().unwrap_or("");
        let src = match input {
            Some(n) => by_name[n],
            None => current,
        };
        let ng = |g: &Graph, t: usize| g.tensors[t].needs_grad;
        let shape = |g: &Graph, t: usize| g.tensors[t].shape.clone();
        let need4 = |g: &Graph, t: usize, what: &str| -> Result<Vec<u64>, ModelError> {
            let s = shape(g, t);
            if s.len() == 4 {
                Ok(s)
            } else {
                Err(error(
                    path,
                    line,
                    format!("{what} needs a 4-D input [batch, height, width, channels]; got {}", show(&s)),
                ))
            }
        };
        // Adds a node; returns its first output tensor.
        let mut node = |g: &mut Graph, n: Node| {
            let out = n.outputs[0].0;
            g.nodes.push(n);
            out
        };
        let relu_after = |g: &mut Graph, t: usize, node: &mut dyn FnMut(&mut Graph, Node) -> usize| {
            let s = g.tensors[t].shape.clone();
            let need = g.tensors[t].needs_grad;
            let out = g.tensor(s, need);
            let name = g.unique(join(&[scope, lname, "Relu"]));
            node(
                g,
                Node {
                    name,
                    inputs: vec![t],
                    outputs: vec![(out, Alloc::Forward(0))],
                    keep: if train { vec![out] } else { vec![] },
                    weights: vec![],
                    temp: 0,
                    input_grads: vec![InputGrad::New("ReluGrad")],
                    weight_grads: vec![],
                },
            )
        };
        let bias_add = |g: &mut Graph, t: usize, channels: u64, node: &mut dyn FnMut(&mut Graph, Node) -> usize| {
            let b = g.weight(join(&[scope, lname, "bias"]), vec![channels], true);
            let s = g.tensors[t].shape.clone();
            let out = g.tensor(s, true);
            let name = g.unique(join(&[scope, lname, "BiasAdd"]));
            node(
                g,
                Node {
                    name,
                    inputs: vec![t],
                    outputs: vec![(out, Alloc::Forward(0))],
                    keep: vec![],
                    weights: vec![b],
                    temp: 0,
                    input_grads: vec![InputGrad::Pass],
                    weight_grads: vec!["BiasAddGrad"],
                },
            )
        };
        let batch_norm = |g: &mut Graph, t: usize, channels: u64, node: &mut dyn FnMut(&mut Graph, Node) -> usize| {
            let ws: Vec<usize> = [("gamma", true), ("beta", true), ("moving_mean", false), ("moving_variance", false)]
                .iter()
                .map(|(n, tr)| g.weight(join(&[scope, lname, n]), vec![channels], *tr))
                .collect();
            let s = g.tensors[t].shape.clone();
            let out = g.tensor(s, true);
            let mut outputs = vec![(out, Alloc::New)];
            let mut keep = vec![];
            if train {
                // The batch mean and variance, saved for the gradient.
                let mean = g.tensor(vec![channels], false);
                let var = g.tensor(vec![channels], false);
                outputs.push((mean, Alloc::New));
                outputs.push((var, Alloc::New));
                keep = vec![t, mean, var];
            }
            let name = g.unique(join(&[scope, lname, "FusedBatchNorm"]));
            node(
                g,
                Node {
                    name,
                    inputs: vec![t],
                    outputs,
                    keep,
                    weights: ws[..2].to_vec(),
                    temp: 0,
                    input_grads: vec![InputGrad::New("FusedBatchNormGrad")],
                    weight_grads: vec!["FusedBatchNormGrad", "FusedBatchNormGrad"],
                },
            )
        };
        let out = match op {
            LayerOp::Conv2d { filters, kernel, stride, padding, bias, batch_norm: bn, relu, workspace } => {
                let s = need4(&g, src, "conv2d")?;
                let (h, w) = match (
                    out_size(s[1], kernel[0], *stride, *padding),
                    out_size(s[2], kernel[1], *stride, *padding),
                ) {
                    (Some(h), Some(w)) => (h, w),
                    _ => {
                        return Err(error(
                            path,
                            line,
                            format!(
                                "conv2d: a {}x{} kernel does not fit the input {} with \"valid\" padding",
                                kernel[0],
                                kernel[1],
                                show(&s)
                            ),
                        ));
                    }
                };
                let k = g.weight(join(&[scope, lname, "kernel"]), vec![kernel[0], kernel[1], s[3], *filters], true);
                let t = g.tensor(vec![s[0], h, w, *filters], true);
                let name = g.unique(join(&[scope, lname, "Conv2D"]));
                let needs = ng(&g, src);
                let mut t = node(
                    &mut g,
                    Node {
                        name,
                        inputs: vec![src],
                        outputs: vec![(t, Alloc::New)],
                        keep: if train { vec![src] } else { vec![] },
                        weights: vec![k],
                        temp: *workspace,
                        input_grads: vec![if needs { InputGrad::New("Conv2DBackpropInput") } else { InputGrad::Pass }],
                        weight_grads: vec!["Conv2DBackpropFilter"],
                    },
                );
                if *bias {
                    t = bias_add(&mut g, t, *filters, &mut node);
                }
                if *bn {
                    t = batch_norm(&mut g, t, *filters, &mut node);
                }
                if *relu {
                    t = relu_after(&mut g, t, &mut node);
                }
                t
            }
            LayerOp::Dense { units, bias, relu } => {
                let s = shape(&g, src);
                if s.len() != 2 {
                    return Err(error(
                        path,
                        line,
                        format!(
                            "dense needs a 2-D input [batch, features] (add a flatten layer before it); got {}",
                            show(&s)
                        ),
                    ));
                }
                let k = g.weight(join(&[scope, lname, "kernel"]), vec![s[1], *units], true);
                let t = g.tensor(vec![s[0], *units], true);
                let name = g.unique(join(&[scope, lname, "MatMul"]));
                let needs = ng(&g, src);
                let mut t = node(
                    &mut g,
                    Node {
                        name,
                        inputs: vec![src],
                        outputs: vec![(t, Alloc::New)],
                        keep: if train { vec![src] } else { vec![] },
                        weights: vec![k],
                        temp: 0,
                        input_grads: vec![if needs { InputGrad::New("MatMul") } else { InputGrad::Pass }],
                        weight_grads: vec!["MatMul_1"],
                    },
                );
                if *bias {
                    t = bias_add(&mut g, t, *units, &mut node);
                }
                if *relu {
                    t = relu_after(&mut g, t, &mut node);
                }
                t
            }
            LayerOp::BiasAdd => {
                let c = *shape(&g, src).last().unwrap_or(&1);
                bias_add(&mut g, src, c, &mut node)
            }
            LayerOp::BatchNorm => {
                let c = *shape(&g, src).last().unwrap_or(&1);
                batch_norm(&mut g, src, c, &mut node)
            }
            LayerOp::Relu => relu_after(&mut g, src, &mut node),
            LayerOp::Softmax => {
                let s = shape(&g, src);
                let needs = ng(&g, src);
                let t = g.tensor(s, needs);
                let name = g.unique(join(&[scope, lname, "Softmax"]));
                node(
                    &mut g,
                    Node {
                        name,
                        inputs: vec![src],
                        outputs: vec![(t, Alloc::New)],
                        keep: if train { vec![t] } else { vec![] },
                        weights: vec![],
                        temp: 0,
                        input_grads: vec![InputGrad::New("mul")],
                        weight_grads: vec![],
                    },
                )
            }
            LayerOp::Pool { max, size, stride, padding } => {
                let s = need4(&g, src, if *max { "max_pool" } else { "avg_pool" })?;
                let (h, w) = match (out_size(s[1], *size, *stride, *padding), out_size(s[2], *size, *stride, *padding))
                {
                    (Some(h), Some(w)) => (h, w),
                    _ => {
                        return Err(error(
                            path,
                            line,
                            format!("pooling: a {size}x{size} window does not fit the input {}", show(&s)),
                        ));
                    }
                };
                let needs = ng(&g, src);
                let t = g.tensor(vec![s[0], h, w, s[3]], needs);
                let name = g.unique(join(&[scope, lname, if *max { "MaxPool" } else { "AvgPool" }]));
                node(
                    &mut g,
                    Node {
                        name,
                        inputs: vec![src],
                        outputs: vec![(t, Alloc::New)],
                        keep: if train && *max { vec![src, t] } else { vec![] },
                        weights: vec![],
                        temp: 0,
                        input_grads: vec![InputGrad::New(if *max { "MaxPoolGrad" } else { "AvgPoolGrad" })],
                        weight_grads: vec![],
                    },
                )
            }
            LayerOp::Resize { size, scale, nearest } => {
                let s = need4(&g, src, "resize")?;
                let (h, w) = match (size, scale) {
                    (Some([h, w]), _) => (*h, *w),
                    (None, Some(k)) => (s[1] * k, s[2] * k),
                    (None, None) => unreachable!("the parser requires size or scale"),
                };
                let needs = ng(&g, src);
                let t = g.tensor(vec![s[0], h, w, s[3]], needs);
                let op_name = if *nearest { "ResizeNearestNeighbor" } else { "ResizeBilinear" };
                let name = g.unique(join(&[scope, lname, op_name]));
                node(
                    &mut g,
                    Node {
                        name,
                        inputs: vec![src],
                        outputs: vec![(t, Alloc::New)],
                        // The bilinear gradient takes the original image (TF passes op.inputs[0]).
                        keep: if train && !nearest { vec![src] } else { vec![] },
                        weights: vec![],
                        temp: 0,
                        input_grads: vec![InputGrad::New(if *nearest {
                            "ResizeNearestNeighborGrad"
                        } else {
                            "ResizeBilinearGrad"
                        })],
                        weight_grads: vec![],
                    },
                )
            }
            LayerOp::Add { inputs, relu } => {
                let ids: Vec<usize> = inputs.iter().map(|n| by_name[n]).collect();
                let s0 = shape(&g, ids[0]);
                for &i in &ids[1..] {
                    let si = shape(&g, i);
                    if si != s0 {
                        return Err(error(
                            path,
                            line,
                            format!("add: inputs have different shapes, {} and {}", show(&s0), show(&si)),
                        ));
                    }
                }
                let needs = ids.iter().any(|&i| ng(&g, i));
                let t = g.tensor(s0, needs);
                let name = g.unique(join(&[scope, lname, "add"]));
                let n = ids.len();
                let mut t = node(
                    &mut g,
                    Node {
                        name,
                        inputs: ids,
                        outputs: vec![(t, Alloc::Forward(0))],
                        keep: vec![],
                        weights: vec![],
                        temp: 0,
                        input_grads: vec![InputGrad::Pass; n],
                        weight_grads: vec![],
                    },
                );
                if *relu {
                    t = relu_after(&mut g, t, &mut node);
                }
                t
            }
            LayerOp::Concat { inputs } => {
                let ids: Vec<usize> = inputs.iter().map(|n| by_name[n]).collect();
                let s0 = need4(&g, ids[0], "concat")?;
                let mut channels = 0;
                for &i in &ids {
                    let si = need4(&g, i, "concat")?;
                    if si[..3] != s0[..3] {
                        return Err(error(
                            path,
                            line,
                            format!("concat: inputs differ in batch, height or width: {} and {}", show(&s0), show(&si)),
                        ));
                    }
                    channels += si[3];
                }
                let needs = ids.iter().any(|&i| ng(&g, i));
                let t = g.tensor(vec![s0[0], s0[1], s0[2], channels], needs);
                let name = g.unique(join(&[scope, lname, "concat"]));
                let n = ids.len();
                node(
                    &mut g,
                    Node {
                        name,
                        inputs: ids,
                        outputs: vec![(t, Alloc::New)],
                        keep: vec![],
                        weights: vec![],
                        temp: 0,
                        input_grads: vec![InputGrad::New("Slice"); n],
                        weight_grads: vec![],
                    },
                )
            }
            LayerOp::Flatten => {
                let s = shape(&g, src);
                let needs = ng(&g, src);
                let t = g.tensor(vec![s[0], s[1..].iter().product()], needs);
                let name = g.unique(join(&[scope, lname, "Reshape"]));
                node(
                    &mut g,
                    Node {
                        name,
                        inputs: vec![src],
                        outputs: vec![(t, Alloc::View(0))],
                        keep: vec![],
                        weights: vec![],
                        temp: 0,
                        input_grads: vec![InputGrad::Pass],
                        weight_grads: vec![],
                    },
                )
            }
            LayerOp::Dropout { .. } => {
                let s = shape(&g, src);
                let needs = ng(&g, src);
                let t = g.tensor(s.clone(), needs);
                if train {
                    let mask = g.tensor(s, false);
                    let mask_name = g.unique(join(&[scope, lname, "dropout/Floor"]));
                    // The mask, kept for the gradient; then the masked output.
                    node(
                        &mut g,
                        Node {
                            name: mask_name,
                            inputs: vec![],
                            outputs: vec![(mask, Alloc::New)],
                            keep: vec![],
                            weights: vec![],
                            temp: 0,
                            input_grads: vec![],
                            weight_grads: vec![],
                        },
                    );
                    let name = g.unique(join(&[scope, lname, "dropout/mul"]));
                    node(
                        &mut g,
                        Node {
                            name,
                            inputs: vec![src, mask],
                            outputs: vec![(t, Alloc::New)],
                            keep: vec![mask],
                            weights: vec![],
                            temp: 0,
                            input_grads: vec![InputGrad::New("Mul"), InputGrad::Pass],
                            weight_grads: vec![],
                        },
                    )
                } else {
                    // Evaluation: dropout is the identity.
                    let name = g.unique(join(&[scope, lname, "dropout/Identity"]));
                    node(
                        &mut g,
                        Node {
                            name,
                            inputs: vec![src],
                            outputs: vec![(t, Alloc::View(0))],
                            keep: vec![],
                            weights: vec![],
                            temp: 0,
                            input_grads: vec![InputGrad::Pass],
                            weight_grads: vec![],
                        },
                    )
                }
            }
            LayerOp::SoftmaxCrossEntropy => {
                let s = shape(&g, src);
                let labels =
                    g.labels.ok_or_else(|| error(path, line, "softmax_cross_entropy needs \"labels\"".into()))?;
                let ls = shape(&g, labels);
                if s.len() != 2 || ls != s {
                    return Err(error(
                        path,
                        line,
                        format!(
                            "softmax_cross_entropy needs logits [batch, classes] shaped like the labels; got {} and labels {}",
                            show(&s),
                            show(&ls)
                        ),
                    ));
                }
                let loss = g.tensor(vec![s[0]], true);
                let backprop = g.tensor(s.clone(), false);
                let name = g.unique(join(&[scope, lname, "SoftmaxCrossEntropyWithLogits"]));
                node(
                    &mut g,
                    Node {
                        name,
                        inputs: vec![src, labels],
                        outputs: vec![(loss, Alloc::New), (backprop, Alloc::New)],
                        keep: if train { vec![backprop] } else { vec![] },
                        weights: vec![],
                        temp: 0,
                        input_grads: vec![InputGrad::New("mul"), InputGrad::Pass],
                        weight_grads: vec![],
                    },
                )
            }
            LayerOp::L2Loss => {
                let s = shape(&g, src);
                let labels = g.labels.ok_or_else(|| error(path, line, "l2_loss needs \"labels\"".into()))?;
                let ls = shape(&g, labels);
                if ls != s {
                    return Err(error(
                        path,
                        line,
                        format!("l2_loss: the output {} and the labels {} differ in shape", show(&s), show(&ls)),
                    ));
                }
                let diff = g.tensor(s, true);
                let name = g.unique(join(&[scope, lname, "SquaredDifference"]));
                node(
                    &mut g,
                    Node {
                        name,
                        inputs: vec![src, labels],
                        outputs: vec![(diff, Alloc::New)],
                        keep: if train { vec![src, labels] } else { vec![] },
                        weights: vec![],
                        temp: 0,
                        input_grads: vec![InputGrad::New("mul"), InputGrad::Pass],
                        weight_grads: vec![],
                    },
                )
            }
        };
        if let Some(n) = name {
            by_name.insert(n.clone(), out);
        }
        current = out;
    }
    g.fetch = current;
    Ok(g)
}

/// Writes trace lines with ids and the current step.
struct Out<'m> {
    text: String,
    next_id: u64,
    events: usize,
    model: &'m Model,
    /// Buffers: (trace id, references).
    buffers: Vec<(u64, u32)>,
}

impl Out<'_> {
    fn shape_for_report(&self, shape: &[u64], activation: bool) -> Vec<u64> {
        if activation && shape.len() == 4 && self.model.data_format == DataFormat::Nchw {
            vec![shape[0], shape[3], shape[1], shape[2]]
        } else {
            shape.to_vec()
        }
    }

    fn line(&mut self, line: std::fmt::Arguments<'_>) {
        let _ = self.text.write_fmt(line);
        self.text.push('\n');
        self.events += 1;
    }

    /// A new buffer with one reference; returns its index.
    fn alloc(&mut self, op: &str, shape: &[u64], kind: Kind, outside: bool) -> usize {
        let bytes = shape.iter().product::<u64>() * self.model.dtype.bytes();
        let id = self.next_id;
        self.next_id += 1;
        let shown = self.shape_for_report(shape, matches!(kind, Kind::Activation | Kind::Gradient | Kind::Input));
        let op = serde_json::to_string(op).unwrap_or_default();
        let outside = if outside { ",\"outside\":true" } else { "" };
        self.line(format_args!(
            "{{\"ev\":\"alloc\",\"id\":{id},\"bytes\":{bytes},\"op\":{op},\"shape\":{},\"dtype\":\"{}\",\"kind\":\"{}\"{outside}}}",
            show(&shown),
            self.model.dtype.name(),
            kind.name()
        ));
        self.buffers.push((id, 1));
        self.buffers.len() - 1
    }

    fn retain(&mut self, buf: usize) {
        self.buffers[buf].1 += 1;
    }

    fn release(&mut self, buf: usize) {
        let b = &mut self.buffers[buf];
        b.1 -= 1;
        if b.1 == 0 {
            let id = b.0;
            self.line(format_args!("{{\"ev\":\"free\",\"id\":{id}}}"));
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

/// A trace of `model` run at `batch` for `steps` steps (JSON Lines, the replay format).
pub fn expand(model: &Model, batch: u64, steps: u32, path: &Path) -> Result<String, ModelError> {
    let g = build(model, batch, path)?;
    let train = model.mode == Mode::Train;
    let mut out = Out { text: String::new(), next_id: 1, events: 0, model, buffers: Vec::new() };
    out.line(format_args!("{{\"ev\":\"step\",\"step\":-1}}"));
    // Weights in creation order, then the optimizer's slots per trainable weight.
    for w in &g.weights {
        out.alloc(&w.name, &w.shape, Kind::Weight, false);
    }
    let slots = model.optimizer.slots();
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
        out.line(format_args!("{{\"ev\":\"step\",\"step\":{step}}}"));
        let mut uses = uses_total.clone();
        let mut buf: Vec<Option<usize>> = vec![None; g.tensors.len()];
        buf[g.input] = Some(out.alloc(&model.input_name, &g.tensors[g.input].shape, Kind::Input, false));
        if let Some(l) = g.labels {
            buf[l] = Some(out.alloc(&model.labels_name, &g.tensors[l].shape, Kind::Input, false));
        }
        if step == 0 {
            for o in &model.outside {
                // Taken once, for the session, like a cuDNN handle.
                let bytes = o.bytes;
                let id = out.next_id;
                out.next_id += 1;
                let op = serde_json::to_string(&o.op).unwrap_or_default();
                out.line(format_args!(
                    "{{\"ev\":\"alloc\",\"id\":{id},\"bytes\":{bytes},\"op\":{op},\"kind\":\"temporary\",\"outside\":true}}"
                ));
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
    Ok(out.text)
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
        let jsonl = expand(&m, 1, 1, Path::new("m.json")).unwrap();
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
        let jsonl = expand(&m, 2, 1, Path::new("m.json")).unwrap();
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
        let jsonl = expand(&m, 1, 2, Path::new("m.json")).unwrap();
        assert!(jsonl.contains("\"op\":\"gradients/AddN\""), "a's gradient from b and from add is summed");
        assert_eq!(jsonl.matches("\"ev\":\"step\"").count(), 3, "setup and two steps");
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
