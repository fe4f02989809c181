//! The model description format (`docs/workload-format.md`): a network as JSON, one object
//! per layer. Every error names the line of the value at fault, semantic ones included
//! ("add: inputs have different shapes"), because each value is located in the source text.

use oomscope_base::size::parse_size;
use oomscope_format::InputError;
use serde::de::DeserializeOwned;
use serde_json::value::RawValue;
use std::collections::{BTreeMap, HashSet};
use std::path::Path;

/// A network and how it is run.
#[derive(Clone, Debug, PartialEq)]
pub struct Model {
    pub name: String,
    pub about: String,
    /// Name scope every node is created in (`shared_model`); empty for none.
    pub scope: String,
    /// One sample's input shape: `[H, W, C]` for images, `[F]` for vectors.
    pub input: Vec<u64>,
    pub input_name: String,
    /// Line of `"input"` in the source, for a batch that makes the input too large.
    pub input_line: usize,
    /// One sample's label shape, when the loss or the evaluation reads labels.
    pub labels: Option<Vec<u64>>,
    pub labels_name: String,
    /// Line of `"labels"` (0 without labels).
    pub labels_line: usize,
    pub dtype: DType,
    /// How 4-D shapes are reported: TF's GPU kernels run NCHW, so its logs show NCHW.
    pub data_format: DataFormat,
    pub batch: u64,
    pub mode: Mode,
    /// Optimizer whose slots exist on the device (in evaluation too, when given: a session
    /// that trained before evaluating still holds them).
    pub optimizer: Optimizer,
    pub steps: u32,
    /// Dataset size, for "evaluate in chunks of N".
    pub samples: Option<u64>,
    /// Memory other libraries take straight from the device when the first op runs.
    pub outside: Vec<Outside>,
    pub layers: Vec<Layer>,
    /// Line of `"layers"` in the source, for errors about the layer list as a whole.
    pub layers_line: usize,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Outside {
    pub op: String,
    pub bytes: u64,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Layer {
    pub op: LayerOp,
    /// The layer's name: a name scope for its nodes, and how later layers refer to it.
    pub name: Option<String>,
    /// The layer it reads (default: the previous one; `input` is the model's input).
    pub input: Option<String>,
    /// Source line, for errors found while expanding.
    pub line: usize,
}

#[derive(Clone, Debug, PartialEq)]
pub enum LayerOp {
    Conv2d {
        filters: u64,
        kernel: [u64; 2],
        stride: u64,
        padding: Padding,
        bias: bool,
        batch_norm: bool,
        relu: bool,
        workspace: u64,
    },
    Dense {
        units: u64,
        bias: bool,
        relu: bool,
    },
    BiasAdd,
    BatchNorm,
    Relu,
    Softmax,
    Pool {
        max: bool,
        size: u64,
        stride: u64,
        padding: Padding,
    },
    Resize {
        size: Option<[u64; 2]>,
        scale: Option<u64>,
        nearest: bool,
    },
    Add {
        inputs: Vec<String>,
        relu: bool,
    },
    Concat {
        inputs: Vec<String>,
    },
    Flatten,
    Dropout {
        rate: f64,
    },
    SoftmaxCrossEntropy,
    L2Loss,
}

impl LayerOp {
    pub fn is_loss(&self) -> bool {
        matches!(self, LayerOp::SoftmaxCrossEntropy | LayerOp::L2Loss)
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Padding {
    Same,
    Valid,
}

pub use oomscope_format::{Mode, Optimizer};

/// The optimizer's slots per trainable variable, as TF names them.
pub fn slots(o: Optimizer) -> &'static [&'static str] {
    match o {
        Optimizer::None | Optimizer::Sgd => &[],
        Optimizer::Momentum => &["Momentum"],
        Optimizer::Adam => &["Adam", "Adam_1"],
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DataFormat {
    Nhwc,
    Nchw,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DType {
    F16,
    BF16,
    F32,
    F64,
    I32,
    I64,
    U8,
}

impl DType {
    pub fn bytes(self) -> u64 {
        match self {
            DType::U8 => 1,
            DType::F16 | DType::BF16 => 2,
            DType::F32 | DType::I32 => 4,
            DType::F64 | DType::I64 => 8,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            DType::F16 => "float16",
            DType::BF16 => "bfloat16",
            DType::F32 => "float32",
            DType::F64 => "float64",
            DType::I32 => "int32",
            DType::I64 => "int64",
            DType::U8 => "uint8",
        }
    }

    fn parse(s: &str) -> Option<DType> {
        Some(match s {
            "float16" | "half" => DType::F16,
            "bfloat16" => DType::BF16,
            "float32" | "float" => DType::F32,
            "float64" | "double" => DType::F64,
            "int32" => DType::I32,
            "int64" => DType::I64,
            "uint8" => DType::U8,
            _ => return None,
        })
    }
}

const TOP_FIELDS: &[&str] = &[
    "name",
    "about",
    "scope",
    "input",
    "input_name",
    "labels",
    "labels_name",
    "dtype",
    "data_format",
    "batch",
    "mode",
    "optimizer",
    "steps",
    "samples",
    "outside",
    "layers",
];

const OPS: &[(&str, &[&str])] = &[
    ("conv2d", &["filters", "kernel", "stride", "padding", "bias", "batch_norm", "activation", "workspace"]),
    ("dense", &["units", "bias", "activation"]),
    ("bias_add", &[]),
    ("batch_norm", &[]),
    ("relu", &[]),
    ("softmax", &[]),
    ("max_pool", &["size", "stride", "padding"]),
    ("avg_pool", &["size", "stride", "padding"]),
    ("resize", &["size", "scale", "method"]),
    ("add", &["inputs", "activation"]),
    ("concat", &["inputs"]),
    ("flatten", &[]),
    ("dropout", &["rate"]),
    ("softmax_cross_entropy", &[]),
    ("l2_loss", &[]),
];

/// The source text and where to report errors.
struct Source<'a> {
    path: &'a Path,
    text: &'a str,
    /// Offsets of the text's newlines, in order: a value's line is a binary search, where
    /// counting from the start each time made a model with many layers quadratic to read.
    newlines: Vec<usize>,
}

impl<'a> Source<'a> {
    fn new(path: &'a Path, text: &'a str) -> Self {
        let newlines = text.bytes().enumerate().filter(|&(_, b)| b == b'\n').map(|(i, _)| i).collect();
        Source { path, text, newlines }
    }

    fn line_of(&self, raw: &RawValue) -> usize {
        let offset = (raw.get().as_ptr() as usize).saturating_sub(self.text.as_ptr() as usize).min(self.text.len());
        self.newlines.partition_point(|&n| n < offset) + 1
    }

    fn error(&self, line: usize, message: impl Into<String>) -> InputError {
        InputError { path: self.path.to_path_buf(), line, message: message.into() }
    }

    /// Deserializes `raw` as `T`; an error names the line and the field.
    fn value<T: DeserializeOwned>(&self, field: &str, raw: &RawValue, expected: &str) -> Result<T, InputError> {
        serde_json::from_str(raw.get()).map_err(|e| {
            let msg = e.to_string();
            let msg = msg.rfind(" at line ").map_or(msg.as_str(), |i| &msg[..i]).to_string();
            self.error(
                self.line_of(raw) + e.line().saturating_sub(1),
                format!("\"{field}\" must be {expected} ({msg})"),
            )
        })
    }

    /// The elements of a JSON array, each with its place in the text.
    fn list(&self, field: &str, raw: &'a RawValue, expected: &str) -> Result<Vec<&'a RawValue>, InputError> {
        serde_json::from_str(raw.get())
            .map_err(|_| self.error(self.line_of(raw), format!("\"{field}\" must be {expected}")))
    }

    fn object(&self, raw: &'a RawValue, what: &str) -> Result<BTreeMap<String, &'a RawValue>, InputError> {
        serde_json::from_str(raw.get())
            .map_err(|_| self.error(self.line_of(raw), format!("{what} must be a JSON object ({{ ... }})")))
    }

    fn positive(&self, field: &str, raw: &RawValue) -> Result<u64, InputError> {
        let v: u64 = self.value(field, raw, "a positive integer")?;
        if v == 0 {
            return Err(self.error(self.line_of(raw), format!("\"{field}\" must be a positive integer, not 0")));
        }
        Ok(v)
    }

    fn shape(&self, field: &str, raw: &RawValue) -> Result<Vec<u64>, InputError> {
        let v: Vec<u64> = self.value(field, raw, "a shape: an array of positive integers")?;
        if v.is_empty() || v.contains(&0) {
            return Err(
                self.error(self.line_of(raw), format!("\"{field}\" must be a non-empty array of positive integers"))
            );
        }
        Ok(v)
    }

    fn size(&self, field: &str, raw: &RawValue) -> Result<u64, InputError> {
        #[derive(serde::Deserialize)]
        #[serde(untagged)]
        enum Size {
            Bytes(u64),
            Text(String),
        }
        match self.value::<Size>(field, raw, "a size (bytes, or text such as \"256MiB\")")? {
            Size::Bytes(b) => Ok(b),
            Size::Text(t) => parse_size(&t).map_err(|e| self.error(self.line_of(raw), format!("\"{field}\": {e}"))),
        }
    }

    fn choice<T: Copy>(&self, field: &str, raw: &RawValue, choices: &[(&str, T)]) -> Result<T, InputError> {
        let s: String = self.value(field, raw, "a string")?;
        choices.iter().find(|(name, _)| *name == s).map(|(_, v)| *v).ok_or_else(|| {
            let names: Vec<&str> = choices.iter().map(|(n, _)| *n).collect();
            self.error(self.line_of(raw), format!("\"{field}\" is {s:?}; expected one of {}", names.join(", ")))
        })
    }
}

/// Parses and checks a model description; `path` names it in errors.
pub fn parse(path: &Path, text: &str) -> Result<Model, InputError> {
    let src = Source::new(path, text);
    let top: BTreeMap<String, &RawValue> = serde_json::from_str(text).map_err(|e| {
        let msg = e.to_string();
        let msg = msg.rfind(" at line ").map_or(msg.as_str(), |i| &msg[..i]).to_string();
        src.error(e.line().max(1), format!("not a model description (a JSON object): {msg}"))
    })?;
    for (key, raw) in &top {
        if !TOP_FIELDS.contains(&key.as_str()) {
            return Err(
                src.error(src.line_of(raw), format!("unknown field {key:?}; a model has: {}", TOP_FIELDS.join(", ")))
            );
        }
    }
    let field = |name: &str| top.get(name).copied();
    let required = |name: &str| field(name).ok_or_else(|| src.error(1, format!("the model has no \"{name}\"")));

    let name: String = match field("name") {
        Some(raw) => src.value("name", raw, "a string")?,
        None => path.file_stem().map_or("model".into(), |s| s.to_string_lossy().into_owned()),
    };
    let about: String = field("about").map(|r| src.value("about", r, "a string")).transpose()?.unwrap_or_default();
    let scope: String = field("scope").map(|r| src.value("scope", r, "a string")).transpose()?.unwrap_or_default();
    let input_raw = required("input")?;
    let input = src.shape("input", input_raw)?;
    let input_line = src.line_of(input_raw);
    let input_name: String =
        field("input_name").map(|r| src.value("input_name", r, "a string")).transpose()?.unwrap_or("input".into());
    let labels = field("labels").map(|r| src.shape("labels", r)).transpose()?;
    let labels_line = field("labels").map_or(0, |r| src.line_of(r));
    let labels_name: String =
        field("labels_name").map(|r| src.value("labels_name", r, "a string")).transpose()?.unwrap_or("labels".into());
    let dtype = match field("dtype") {
        None => DType::F32,
        Some(raw) => {
            let s: String = src.value("dtype", raw, "a string")?;
            DType::parse(&s).ok_or_else(|| {
                src.error(
                    src.line_of(raw),
                    format!("\"dtype\" is {s:?}; expected float16, bfloat16, float32, float64, int32, int64 or uint8"),
                )
            })?
        }
    };
    let data_format = field("data_format")
        .map(|r| src.choice("data_format", r, &[("NHWC", DataFormat::Nhwc), ("NCHW", DataFormat::Nchw)]))
        .transpose()?
        .unwrap_or(DataFormat::Nhwc);
    let batch = src.positive("batch", required("batch")?)?;
    let mode = field("mode")
        .map(|r| src.choice("mode", r, &[("train", Mode::Train), ("eval", Mode::Eval)]))
        .transpose()?
        .unwrap_or(Mode::Train);
    let optimizer = field("optimizer")
        .map(|r| {
            src.choice(
                "optimizer",
                r,
                &[
                    ("none", Optimizer::None),
                    ("sgd", Optimizer::Sgd),
                    ("momentum", Optimizer::Momentum),
                    ("adam", Optimizer::Adam),
                ],
            )
        })
        .transpose()?
        .unwrap_or(if mode == Mode::Train { Optimizer::Sgd } else { Optimizer::None });
    let steps = match field("steps") {
        Some(raw) => {
            let steps = src.positive("steps", raw)?;
            u32::try_from(steps).ok().filter(|&s| s <= super::expand::MAX_STEPS).ok_or_else(|| {
                src.error(src.line_of(raw), format!("\"steps\": {}", super::expand::too_many_steps(steps)))
            })?
        }
        None => 1,
    };
    let samples = field("samples").map(|r| src.positive("samples", r)).transpose()?;
    let mut outside = Vec::new();
    if let Some(raw) = field("outside") {
        let items = src.list("outside", raw, "an array of {\"op\": ..., \"bytes\": ...}")?;
        for item in items {
            let obj = src.object(item, "an \"outside\" entry")?;
            let op: String = match obj.get("op") {
                Some(r) => src.value("op", r, "a string")?,
                None => return Err(src.error(src.line_of(item), "an \"outside\" entry needs \"op\"")),
            };
            let bytes = match obj.get("bytes") {
                Some(r) => src.size("bytes", r)?,
                None => return Err(src.error(src.line_of(item), "an \"outside\" entry needs \"bytes\"")),
            };
            outside.push(Outside { op, bytes });
        }
    }
    let layers_raw = required("layers")?;
    let layers_line = src.line_of(layers_raw);
    let raw_layers = src.list("layers", layers_raw, "an array of layers")?;
    if raw_layers.is_empty() {
        return Err(src.error(layers_line, "\"layers\" is empty"));
    }
    let mut names: HashSet<String> = HashSet::from([input_name.clone()]);
    let mut layers = Vec::with_capacity(raw_layers.len());
    for raw in raw_layers {
        let layer = parse_layer(&src, raw, &names)?;
        if let Some(n) = &layer.name {
            names.insert(n.clone());
        }
        layers.push(layer);
    }
    let model = Model {
        name,
        about,
        scope,
        input,
        input_name,
        input_line,
        labels,
        labels_name,
        labels_line,
        dtype,
        data_format,
        batch,
        mode,
        optimizer,
        steps,
        samples,
        outside,
        layers,
        layers_line,
    };
    check(&src, &model)?;
    Ok(model)
}

fn parse_layer(src: &Source<'_>, raw: &RawValue, known: &HashSet<String>) -> Result<Layer, InputError> {
    let line = src.line_of(raw);
    let obj = src.object(raw, "a layer")?;
    let op_raw = obj.get("op").ok_or_else(|| src.error(line, "a layer needs \"op\""))?;
    let op_name: String = src.value("op", op_raw, "a string")?;
    let Some((_, params)) = OPS.iter().find(|(n, _)| *n == op_name) else {
        let names: Vec<&str> = OPS.iter().map(|(n, _)| *n).collect();
        return Err(src.error(line, format!("unknown op {op_name:?}; expected one of {}", names.join(", "))));
    };
    for (key, value) in &obj {
        if !["op", "name", "input"].contains(&key.as_str()) && !params.contains(&key.as_str()) {
            let mut all = vec!["name", "input"];
            all.extend_from_slice(params);
            return Err(src.error(
                src.line_of(value),
                format!("{op_name} has no parameter {key:?}; its parameters: {}", all.join(", ")),
            ));
        }
    }
    let get = |k: &str| obj.get(k).copied();
    let flag = |k: &str, default: bool| -> Result<bool, InputError> {
        get(k).map(|r| src.value(k, r, "true or false")).transpose().map(|v| v.unwrap_or(default))
    };
    let relu = || -> Result<bool, InputError> {
        get("activation")
            .map(|r| src.choice("activation", r, &[("relu", true), ("linear", false), ("none", false)]))
            .transpose()
            .map(|v| v.unwrap_or(false))
    };
    let padding = |default: Padding| -> Result<Padding, InputError> {
        get("padding")
            .map(|r| src.choice("padding", r, &[("same", Padding::Same), ("valid", Padding::Valid)]))
            .transpose()
            .map(|v| v.unwrap_or(default))
    };
    let reference = |k: &str, r: &RawValue, name: &str| -> Result<String, InputError> {
        if known.contains(name) {
            Ok(name.to_string())
        } else {
            Err(src.error(src.line_of(r), format!("\"{k}\" names {name:?}, which is no earlier layer (nor the input)")))
        }
    };
    let inputs = |min: usize| -> Result<Vec<String>, InputError> {
        let r =
            get("inputs").ok_or_else(|| src.error(line, format!("{op_name} needs \"inputs\": the layers it joins")))?;
        let names: Vec<String> = src.value("inputs", r, "an array of layer names")?;
        if names.len() < min {
            return Err(src.error(src.line_of(r), format!("\"inputs\" needs at least {min} layer names")));
        }
        names.iter().map(|n| reference("inputs", r, n)).collect()
    };
    let op = match op_name.as_str() {
        "conv2d" => LayerOp::Conv2d {
            filters: src
                .positive("filters", get("filters").ok_or_else(|| src.error(line, "conv2d needs \"filters\""))?)?,
            kernel: match get("kernel") {
                None => [3, 3],
                Some(r) => match src.value::<serde_json::Value>("kernel", r, "a size")? {
                    serde_json::Value::Array(_) => {
                        let v = src.shape("kernel", r)?;
                        <[u64; 2]>::try_from(v)
                            .map_err(|_| src.error(src.line_of(r), "\"kernel\" must be k or [kh, kw]"))?
                    }
                    _ => {
                        let k = src.positive("kernel", r)?;
                        [k, k]
                    }
                },
            },
            stride: get("stride").map(|r| src.positive("stride", r)).transpose()?.unwrap_or(1),
            padding: padding(Padding::Same)?,
            bias: flag("bias", true)?,
            batch_norm: flag("batch_norm", false)?,
            relu: relu()?,
            workspace: get("workspace").map(|r| src.size("workspace", r)).transpose()?.unwrap_or(0),
        },
        "dense" => LayerOp::Dense {
            units: src.positive("units", get("units").ok_or_else(|| src.error(line, "dense needs \"units\""))?)?,
            bias: flag("bias", true)?,
            relu: relu()?,
        },
        "bias_add" => LayerOp::BiasAdd,
        "batch_norm" => LayerOp::BatchNorm,
        "relu" => LayerOp::Relu,
        "softmax" => LayerOp::Softmax,
        "max_pool" | "avg_pool" => {
            let size = get("size").map(|r| src.positive("size", r)).transpose()?.unwrap_or(2);
            LayerOp::Pool {
                max: op_name == "max_pool",
                size,
                stride: get("stride").map(|r| src.positive("stride", r)).transpose()?.unwrap_or(size),
                padding: padding(Padding::Same)?,
            }
        }
        "resize" => {
            let size = get("size")
                .map(|r| {
                    let v = src.shape("size", r)?;
                    <[u64; 2]>::try_from(v).map_err(|_| src.error(src.line_of(r), "\"size\" must be [height, width]"))
                })
                .transpose()?;
            let scale = get("scale").map(|r| src.positive("scale", r)).transpose()?;
            if size.is_some() == scale.is_some() {
                return Err(src.error(line, "resize needs either \"size\": [h, w] or \"scale\": n"));
            }
            let nearest = get("method")
                .map(|r| src.choice("method", r, &[("bilinear", false), ("nearest", true)]))
                .transpose()?
                .unwrap_or(false);
            LayerOp::Resize { size, scale, nearest }
        }
        "add" => LayerOp::Add { inputs: inputs(2)?, relu: relu()? },
        "concat" => LayerOp::Concat { inputs: inputs(2)? },
        "flatten" => LayerOp::Flatten,
        "dropout" => {
            let rate: f64 = match get("rate") {
                Some(r) => src.value("rate", r, "a number")?,
                None => 0.5,
            };
            if !(0.0..1.0).contains(&rate) {
                return Err(src.error(line, format!("\"rate\" is {rate}; it must be at least 0 and below 1")));
            }
            LayerOp::Dropout { rate }
        }
        "softmax_cross_entropy" => LayerOp::SoftmaxCrossEntropy,
        "l2_loss" => LayerOp::L2Loss,
        _ => unreachable!("every name in OPS is matched above"),
    };
    let name = get("name").map(|r| src.value::<String>("name", r, "a string")).transpose()?;
    if let (Some(n), Some(r)) = (&name, get("name"))
        && known.contains(n)
    {
        return Err(
            src.error(src.line_of(r), format!("the name {n:?} is already taken by an earlier layer or the input"))
        );
    }
    let input = match get("input") {
        Some(r) => {
            let n: String = src.value("input", r, "a layer name")?;
            Some(reference("input", r, &n)?)
        }
        None => None,
    };
    Ok(Layer { op, name, input, line })
}

/// Checks that need the whole model.
fn check(src: &Source<'_>, m: &Model) -> Result<(), InputError> {
    let losses: Vec<&Layer> = m.layers.iter().filter(|l| l.op.is_loss()).collect();
    if m.mode == Mode::Train && losses.is_empty() {
        return Err(src.error(
            m.layers_line,
            "a model trained (\"mode\": \"train\") needs a loss layer at the end: softmax_cross_entropy or l2_loss",
        ));
    }
    if let Some(loss) = losses.first() {
        if m.labels.is_none() {
            return Err(src.error(loss.line, "a loss layer needs the model's \"labels\" shape"));
        }
        if m.layers.last().map(|l| l.line) != Some(loss.line) {
            return Err(src.error(loss.line, "the loss layer must be the last layer"));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_err(text: &str) -> String {
        parse(Path::new("m.json"), text).expect_err(text).to_string()
    }

    const BASE: &str = "{\n  \"input\": [8, 8, 3],\n  \"batch\": 4,\n  \"mode\": \"eval\",\n  \"layers\": [\n";

    #[test]
    fn reads_a_small_model() {
        let m = parse(
            Path::new("tiny.json"),
            &format!("{BASE}    {{\"op\": \"conv2d\", \"name\": \"c1\", \"filters\": 16, \"activation\": \"relu\"}},\n    {{\"op\": \"max_pool\"}},\n    {{\"op\": \"flatten\"}},\n    {{\"op\": \"dense\", \"units\": 10}}\n  ]\n}}"),
        )
        .unwrap();
        assert_eq!(m.name, "tiny", "the file name when the model has none");
        assert_eq!(m.layers.len(), 4);
        assert_eq!(m.layers[0].line, 6);
        assert!(matches!(m.layers[0].op, LayerOp::Conv2d { filters: 16, kernel: [3, 3], relu: true, bias: true, .. }));
        assert_eq!(m.optimizer, Optimizer::None);
    }

    #[test]
    fn refuses_bad_models_with_the_line_and_a_reason() {
        let cases = [
            ("{\"batch\": 1}", "m.json:1: the model has no \"input\""),
            ("[1, 2]", "m.json:1: not a model description (a JSON object)"),
            ("{\"input\": [1],\n\"batch\": 1,\n\"layers\": [], \"colour\": 3}", "m.json:3: unknown field \"colour\""),
            (&format!("{BASE}    {{\"op\": \"conv3d\", \"filters\": 3}}\n  ]\n}}"), "m.json:6: unknown op \"conv3d\""),
            (&format!("{BASE}    {{\"op\": \"conv2d\"}}\n  ]\n}}"), "m.json:6: conv2d needs \"filters\""),
            (
                &format!("{BASE}    {{\"op\": \"conv2d\",\n      \"filtres\": 3}}\n  ]\n}}"),
                "m.json:7: conv2d has no parameter \"filtres\"",
            ),
            (
                &format!("{BASE}    {{\"op\": \"conv2d\", \"filters\": \"64\"}}\n  ]\n}}"),
                "m.json:6: \"filters\" must be a positive integer",
            ),
            (
                &format!("{BASE}    {{\"op\": \"conv2d\", \"filters\": 0}}\n  ]\n}}"),
                "m.json:6: \"filters\" must be a positive integer, not 0",
            ),
            (
                &format!("{BASE}    {{\"op\": \"add\", \"inputs\": [\"input\", \"nope\"]}}\n  ]\n}}"),
                "m.json:6: \"inputs\" names \"nope\", which is no earlier layer",
            ),
            (
                &format!("{BASE}    {{\"op\": \"relu\", \"name\": \"input\"}}\n  ]\n}}"),
                "m.json:6: the name \"input\" is already taken",
            ),
            (&format!("{BASE}    {{\"op\": \"resize\"}}\n  ]\n}}"), "m.json:6: resize needs either"),
            (&format!("{BASE}    {{\"op\": \"dropout\", \"rate\": 1.5}}\n  ]\n}}"), "m.json:6: \"rate\" is 1.5"),
            (
                &format!("{BASE}    {{\"op\": \"conv2d\", \"filters\": 3, \"padding\": \"full\"}}\n  ]\n}}"),
                "m.json:6: \"padding\" is \"full\"; expected one of same, valid",
            ),
            (
                "{\"input\": [1], \"batch\": 1, \"mode\": \"train\",\n\"layers\": [{\"op\": \"relu\"}]}",
                "m.json:2: a model trained (\"mode\": \"train\") needs a loss layer",
            ),
            (
                "{\"input\": [1], \"batch\": 0, \"layers\": [{\"op\": \"relu\"}]}",
                "m.json:1: \"batch\" must be a positive integer, not 0",
            ),
            (
                "{\"input\": [1], \"batch\": 1, \"dtype\": \"float8\", \"layers\": [{\"op\": \"relu\"}]}",
                "m.json:1: \"dtype\" is \"float8\"",
            ),
            (
                "{\"input\": [1], \"batch\": 1, \"outside\": [{\"op\": \"x\", \"bytes\": \"12GB\"}], \"layers\": [{\"op\": \"relu\"}]}",
                "m.json:1: \"bytes\": \"12GB\" is not a size",
            ),
            (
                "{\"input\": [1],\n \"batch\": 1,\n \"layers\": [{\"op\": \"relu\"}, 7]}",
                "m.json:3: a layer must be a JSON object",
            ),
            ("{\"input\": [1], \"batch\": 1, \"layers\": [{\"op\": \"relu\"}", "m.json:1: not a model description"),
        ];
        for (text, expected) in cases {
            let err = parse_err(text);
            assert!(err.starts_with(expected), "{text}\n  gave     {err}\n  expected {expected}");
        }
    }
}
