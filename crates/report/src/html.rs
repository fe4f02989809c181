//! One file to share: a dump, a job or a replay as a self-contained HTML page. Nothing is
//! fetched (styles, drawings and the one small script are inline, and the page's content
//! policy forbids any request), and everything essential reads with scripts off: the verdict
//! and the fix first, then memory over time by op, the ranked nodes with their kinds, the
//! map of where the bytes are, the allocator's own report and what the input lacked. The
//! drawings are SVG written here, bounded whatever the dump's size: the history is sampled
//! (each sample keeps the highest point of its stretch) and the map draws a block narrower
//! than two pixels together with its neighbours.

use crate::{Format, describe_process, render};
use oomscope_base::size::{human, torch};
use oomscope_base::text::safe;
use oomscope_format::job::JobReport;
use oomscope_format::{Dump, EventKind, Kind, KindBytes, Verdict, VerdictKind};
use std::collections::HashMap;
use std::fmt::Write;

/// Points of the memory-over-time drawing at most.
const SAMPLES: usize = 600;
/// Ops drawn in their own colour; the rest are drawn together.
const TOP_OPS: usize = 10;
/// Regions (segments) drawn in the map at most; the rest are counted.
const MAP_ROWS: usize = 200;
/// Nodes listed in the table at most.
const TABLE_ROWS: usize = 60;
/// Drawing width in pixels.
const WIDTH: f64 = 960.0;

/// Colours for the largest ops, then one for all the others, one for memory from before the
/// history, and one for free memory.
const PALETTE: [&str; TOP_OPS] =
    ["#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2", "#edc948", "#b07aa1", "#ff9da7", "#9c755f", "#86bcb6"];
const OTHER: &str = "#bab0ac";
const EARLIER: &str = "#d4d4d4";
const FREE: &str = "#f4f4f4";

/// The page of one dump (an OOM, a state, an import, a replay with its what-ifs).
pub fn page(d: &Dump) -> String {
    let style = Style::of(d);
    let mut body = String::new();
    body.push_str(&header(d, style));
    if let Some(v) = &d.verdict {
        body.push_str(&verdict(v, style));
    }
    body.push_str(&dump_sections(d, style));
    document(&title(d), &body)
}

/// The page of a job: the job's verdict, the rank that failed first, every rank side by side
/// at the failure, what sets the failing rank apart, then (when its dump is given) the
/// failing rank's own page.
pub fn job_page(j: &JobReport, failing: Option<&Dump>) -> String {
    let style = failing.map_or(Style::Torch, Style::of);
    let s = |n: u64| style.size(n);
    let mut b = String::new();
    let _ = write!(
        b,
        "<header><h1>Job {}: {}</h1></header>",
        name(j.job.as_deref().unwrap_or("(unnamed)")),
        match &j.first_failure {
            Some(f) => format!(
                "rank {} ran out of memory first{}{}",
                f.rank,
                if f.host.is_empty() { String::new() } else { format!(" on {}", name(&f.host)) },
                f.gpu.map_or(String::new(), |g| format!(", GPU {g}"))
            ),
            None => "no rank ran out of memory".to_string(),
        }
    );
    if let Some(v) = &j.verdict {
        let _ = write!(
            b,
            "<section id=\"verdict\" class=\"verdict\"><h2>Verdict for the job: {}</h2><ul>{}</ul><p class=\"fix\"><b>Fix:</b> {}</p></section>",
            esc(&v.headline),
            v.evidence.iter().map(|e| format!("<li>{}</li>", esc(e))).collect::<String>(),
            esc(&v.fix)
        );
    }
    if let Some(f) = &j.first_failure {
        let _ = write!(
            b,
            "<section id=\"first\"><h2>The first failure: rank {}</h2><p>{}{}{}</p>",
            f.rank,
            if f.step >= 0 { format!("at step {}; ", f.step) } else { String::new() },
            f.request.map_or(String::new(), |r| format!("{} requested; ", s(r))),
            esc(&f.dump)
        );
        b.push_str(&verdict_body(&f.verdict, style));
        b.push_str("</section>");
    }
    b.push_str(&ranks(j, style));
    if !j.differences.is_empty() {
        b.push_str("<section id=\"differences\"><h2>What sets the failing rank apart</h2><table><tr><th>what</th><th>name</th><th class=\"n\">on the failing rank</th><th class=\"n\">the others' median</th></tr>");
        for d in &j.differences {
            let (mine, theirs) = match (&d.shape, &d.usual) {
                (Some(a), Some(u)) => (oomscope_base::shape::text(a), oomscope_base::shape::text(u)),
                _ => (s(d.bytes), d.median.map_or("-".to_string(), s)),
            };
            let _ = write!(
                b,
                "<tr><td>{}</td><td>{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td></tr>",
                esc(match d.what {
                    oomscope_format::job::DifferenceKind::Kind => "kind",
                    oomscope_format::job::DifferenceKind::Node => "node",
                    oomscope_format::job::DifferenceKind::Shape => "shape",
                    oomscope_format::job::DifferenceKind::Request => "request",
                }),
                name(&d.name),
                esc(&mine),
                esc(&theirs)
            );
        }
        b.push_str("</table></section>");
    }
    if let Some(d) = failing {
        b.push_str("<h2 class=\"part\">The failing rank</h2>");
        b.push_str(&dump_sections(d, style));
    }
    document(&format!("oomscope: job {}", j.job.as_deref().unwrap_or("")), &b)
}

/// Sizes as the framework prints them: PyTorch's `2.00 GiB`, TensorFlow's `2.00GiB`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Style {
    Torch,
    Tf,
}

impl Style {
    fn of(d: &Dump) -> Style {
        let torch = d.allocator_kind() == oomscope_format::AllocatorKind::Caching
            || d.imported.as_ref().is_some_and(|i| {
                i.from == oomscope_format::ImportedFrom::TorchSnapshot
                    || i.message.as_ref().is_some_and(|m| m.framework == oomscope_format::Framework::PyTorch)
            });
        if torch { Style::Torch } else { Style::Tf }
    }

    fn size(self, n: u64) -> String {
        match self {
            Style::Torch => torch(n),
            Style::Tf => human(n),
        }
    }
}

/// Text for HTML: unsafe characters written out, markup characters escaped.
/// The longest name (an op, a host, a job) a page shows, in characters: a name is the
/// input's, and a page repeats names in tooltips and tables.
const NAME_CHARS: usize = 160;
/// Blocks the map draws at the most, all rows together: a block narrower than its share of
/// the width is drawn with its neighbours, so the page's size follows its drawing, not the
/// number of blocks.
const MAP_BLOCKS: usize = 12_000;

/// A name from the input, escaped and cut to [`NAME_CHARS`] (`…` where it was cut).
fn name(s: &str) -> String {
    match s.char_indices().nth(NAME_CHARS) {
        Some((at, _)) => esc(&format!("{}…", &s[..at])),
        None => esc(s),
    }
}

fn esc(s: &str) -> String {
    let s = safe(s);
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

fn title(d: &Dump) -> String {
    match (&d.verdict, &d.oom) {
        (Some(v), Some(_)) => format!("oomscope: out of memory, {}", v.kind.name()),
        (Some(v), None) => format!("oomscope: {}", v.kind.name()),
        _ => "oomscope".to_string(),
    }
}

fn document(title: &str, body: &str) -> String {
    let mut o = String::with_capacity(body.len() + 4096);
    let _ = write!(
        o,
        "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; style-src 'unsafe-inline'; \
         script-src 'unsafe-inline'; img-src data:\">\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\
         <meta name=\"generator\" content=\"oomscope {}\"><title>{}</title><style>{STYLE}</style></head>\n<body>{body}\
         <footer>Written by oomscope {}; one file, nothing fetched.</footer><script>{SCRIPT}</script></body></html>\n",
        env!("CARGO_PKG_VERSION"),
        esc(title),
        env!("CARGO_PKG_VERSION"),
    );
    o
}

const STYLE: &str = "body{font:14px/1.45 system-ui,-apple-system,Segoe UI,sans-serif;margin:24px auto;max-width:1000px;\
padding:0 12px;color:#222}h1{font-size:22px;margin:0 0 4px}h2{font-size:17px;margin:28px 0 8px;border-bottom:1px solid #ddd}\
h2.part{font-size:20px;border:0;margin-top:40px}.src{color:#666;margin:0}\
.verdict{background:#fff6f4;border:1px solid #f0c4bb;border-radius:6px;padding:4px 16px 12px}\
.verdict.fits{background:#f3faf2;border-color:#c3e2bf}.headline{font-size:16px;font-weight:600}\
.fix{background:#fff;border-left:4px solid #59a14f;padding:6px 10px}table{border-collapse:collapse;width:100%;font-size:13px}\
th,td{text-align:left;padding:3px 6px;border-bottom:1px solid #eee;vertical-align:top}td.n,th.n{text-align:right;\
white-space:nowrap;font-variant-numeric:tabular-nums}td.op{word-break:break-all}pre{background:#f7f7f7;padding:10px;\
overflow:auto;font-size:12px;line-height:1.3}svg{display:block;max-width:100%;height:auto}svg text{font:11px sans-serif}\
.legend span{display:inline-block;margin:2px 10px 2px 0;font-size:12px}.legend i{display:inline-block;width:11px;height:11px;\
margin-right:4px;vertical-align:-1px}.note{color:#666}input{font:inherit;padding:3px 6px;margin:4px 0;width:280px}\
.wide{overflow-x:auto}footer{color:#888;font-size:12px;margin-top:32px}.hl{stroke:#000;stroke-width:1.5}";

/// Filters the nodes table as one types, and outlines an op's blocks in the drawings when the
/// pointer is on one of them. Nothing else; the page reads the same without it.
const SCRIPT: &str = "(function(){var f=document.getElementById('filter');if(f){f.hidden=false;f.addEventListener('input',\
function(){var q=f.value.toLowerCase();document.querySelectorAll('#nodes tr[data-op]').forEach(function(r){\
r.style.display=r.getAttribute('data-op').toLowerCase().indexOf(q)<0?'none':'';});});}\
var on=null;document.querySelectorAll('svg [class^=o]').forEach(function(e){e.addEventListener('mouseenter',function(){\
var c=e.getAttribute('class');if(on)on.forEach(function(x){x.classList.remove('hl');});on=document.querySelectorAll('svg .'+c);\
on.forEach(function(x){x.classList.add('hl');});});});})();";

fn header(d: &Dump, style: Style) -> String {
    let what = match (&d.oom, &d.imported) {
        (Some(o), _) => {
            let mut s = format!("Out of memory: {} requested", style.size(o.requested));
            if let Some(op) = &o.op {
                let _ = write!(s, " by {}", name(op));
            }
            if o.step >= 0 {
                let _ = write!(s, " at step {}", o.step);
            }
            s
        }
        (None, Some(_)) => "Imported: no failed request in the input".to_string(),
        (None, None) => "No out-of-memory error".to_string(),
    };
    let mut src = Vec::new();
    if let Some(p) = d.process.as_ref().filter(|p| p.in_job()) {
        src.push(esc(&describe_process(p, d.gpu())));
    }
    if let Some(path) = &d.source.path {
        src.push(format!("from {}", esc(path)));
    }
    if d.device.total > 0 {
        src.push(format!("{} ({} total)", esc(&d.device.name), style.size(d.device.total)));
    }
    format!("<header><h1>{what}</h1><p class=\"src\">{}</p></header>", src.join(" · "))
}

fn verdict(v: &Verdict, style: Style) -> String {
    format!(
        "<section id=\"verdict\" class=\"verdict{}\"><h2>Verdict: {}</h2>{}</section>",
        if v.kind == VerdictKind::Fits { " fits" } else { "" },
        esc(v.kind.name()),
        verdict_body(v, style)
    )
}

fn verdict_body(v: &Verdict, style: Style) -> String {
    let mut o = format!("<p class=\"headline\">{}</p>", esc(&v.headline));
    if !v.evidence.is_empty() {
        o.push_str("<ul>");
        for e in &v.evidence {
            let _ = write!(o, "<li>{}</li>", esc(e));
        }
        o.push_str("</ul>");
    }
    let _ = write!(o, "<p class=\"fix\"><b>Fix:</b> {}</p>", esc(&v.fix));
    if v.breakdown.iter().any(|k| k.bytes > 0) {
        o.push_str(&kinds_bar(&v.breakdown, style));
    }
    o
}

/// Live memory by kind, as one bar with its legend.
fn kinds_bar(b: &[KindBytes], style: Style) -> String {
    let total: u64 = b.iter().map(|k| k.bytes).sum();
    if total == 0 {
        return String::new();
    }
    let mut o = format!(
        "<svg id=\"kinds\" viewBox=\"0 0 {WIDTH} 22\" width=\"{WIDTH}\" height=\"22\" role=\"img\"><title>live memory by kind</title>"
    );
    let mut x = 0.0;
    for k in b.iter().filter(|k| k.bytes > 0) {
        let w = k.bytes as f64 / total as f64 * WIDTH;
        let _ = write!(
            o,
            "<rect x=\"{x:.1}\" y=\"2\" width=\"{w:.1}\" height=\"18\" fill=\"{}\"><title>{}: {}</title></rect>",
            kind_colour(k.kind),
            k.kind.plural(),
            style.size(k.bytes)
        );
        x += w;
    }
    o.push_str("</svg><div class=\"legend\">");
    for k in b.iter().filter(|k| k.bytes > 0) {
        let _ = write!(
            o,
            "<span><i style=\"background:{}\"></i>{} {} ({:.0}%)</span>",
            kind_colour(k.kind),
            k.kind.plural(),
            style.size(k.bytes),
            k.bytes as f64 * 100.0 / total as f64
        );
    }
    o.push_str("</div>");
    o
}

fn kind_colour(k: Kind) -> &'static str {
    match k {
        Kind::Weight => "#4e79a7",
        Kind::Gradient => "#59a14f",
        Kind::Optimizer => "#b07aa1",
        Kind::Input => "#edc948",
        Kind::Activation => "#f28e2b",
        Kind::Temporary => "#76b7b2",
        Kind::Unknown => "#bab0ac",
        _ => "#e15759",
    }
}

/// The sections every dump's page has after its verdict.
fn dump_sections(d: &Dump, style: Style) -> String {
    let colours = Colours::of(d);
    let mut o = String::new();
    let rows = d.what_ifs.as_ref().map(|t| t.rows.as_slice()).or(d.replay.as_ref().map(|r| r.what_ifs.as_slice()));
    let account = crate::replay::account(d);
    if !account.is_empty() && rows.is_none_or(<[_]>::is_empty) {
        let _ = write!(o, "<section id=\"replay\"><h2>The replay</h2><pre>{}</pre></section>", esc(&account));
    }
    if let Some(rows) = rows.filter(|r| !r.is_empty()) {
        let _ = write!(
            o,
            "<section id=\"whatifs\"><h2>The same requests under other settings</h2><pre>{}</pre><table><tr><th>settings</th><th class=\"n\">OOMs</th><th class=\"n\">peak reserved</th><th class=\"n\">peak allocated</th><th class=\"n\">device allocations</th></tr>",
            esc(account.split("\n\n").next().unwrap_or(""))
        );
        for r in rows {
            let _ = write!(
                o,
                "<tr><td>{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td></tr>",
                esc(&crate::replay::label(&r.settings)),
                r.ooms,
                style.size(r.peak_reserved),
                style.size(r.peak_allocated),
                r.device_allocs
            );
        }
        o.push_str("</table></section>");
    }
    o.push_str("<section id=\"timeline\"><h2>Memory over time, by op</h2>");
    match timeline(d, style, &colours) {
        Some(svg) => o.push_str(&svg),
        None => o.push_str("<p class=\"note\">The input has no history of allocations to draw.</p>"),
    }
    o.push_str("</section>");
    o.push_str(&nodes(d, style, &colours));
    o.push_str("<section id=\"map\"><h2>Where the bytes are</h2>");
    match map(d, style, &colours) {
        Some(svg) => o.push_str(&svg),
        None => o.push_str("<p class=\"note\">The input does not list the allocator's blocks.</p>"),
    }
    o.push_str("</section>");
    let snapshot = d.imported.as_ref().is_some_and(|i| i.from == oomscope_format::ImportedFrom::TorchSnapshot);
    let (words, format) = if d.imported.as_ref().is_some_and(|i| i.message.is_some()) {
        ("The message's figures", Format::Tf)
    } else if d.allocator_kind() == oomscope_format::AllocatorKind::Caching {
        ("The allocator's report, in PyTorch's words", Format::Tf)
    } else if snapshot {
        ("The snapshot's figures", Format::Summary)
    } else {
        ("The allocator's report, in TensorFlow's words", Format::Tf)
    };
    let _ =
        write!(o, "<section id=\"report\"><h2>{words}</h2><pre>{}</pre></section>", esc(&bounded(&render(d, format))));
    if let Some(i) = &d.imported {
        let absent: Vec<&str> = i.absent.iter().map(|s| s.describe()).collect();
        if !absent.is_empty() {
            let _ = write!(
                o,
                "<section id=\"lacked\"><h2>What the input lacked</h2><p>Not in {}: {}. These parts of the report are left out, not guessed.</p></section>",
                esc(d.source.path.as_deref().unwrap_or("the input")),
                esc(&absent.join(", "))
            );
        }
    }
    o
}

/// Lines of the allocator's report kept at the start and at the end: TF's text lists every
/// chunk, a million lines for a million allocations.
const REPORT_HEAD: usize = 1500;
const REPORT_TAIL: usize = 300;

/// The report, its middle left out when it is longer than the page should carry.
fn bounded(text: &str) -> String {
    let lines: Vec<&str> = text.lines().collect();
    if lines.len() <= REPORT_HEAD + REPORT_TAIL + 1 {
        return text.to_string();
    }
    let mut o = lines[..REPORT_HEAD].join("\n");
    let _ = write!(
        o,
        "\n... {} lines left out here (`oomscope report DUMP` prints them all) ...\n",
        lines.len() - REPORT_HEAD - REPORT_TAIL
    );
    o.push_str(&lines[lines.len() - REPORT_TAIL..].join("\n"));
    o.push('\n');
    o
}

/// One colour per op: the largest ops (by live bytes, then by bytes in the history) their own.
struct Colours {
    index: HashMap<String, usize>,
}

impl Colours {
    fn of(d: &Dump) -> Colours {
        let mut bytes: HashMap<&str, u64> = HashMap::new();
        for c in d.live_chunks() {
            *bytes.entry(c.op.as_deref().unwrap_or(UNNAMED)).or_default() += c.size;
        }
        for n in &d.usage_by_node {
            bytes.entry(n.op.as_str()).or_insert(n.bytes);
        }
        // And the most each op held at once in the history: an op the drawing of the past shows
        // large is coloured there too.
        let mut now: HashMap<&str, u64> = HashMap::new();
        let mut at: HashMap<u64, (&str, u64)> = HashMap::new();
        for e in &d.events {
            match e.kind {
                EventKind::Alloc => {
                    let op = e.op.as_deref().unwrap_or(UNNAMED);
                    let v = now.entry(op).or_default();
                    *v += e.size;
                    let v = *v;
                    let most = bytes.entry(op).or_default();
                    *most = (*most).max(v);
                    at.insert(e.address, (op, e.size));
                }
                EventKind::Free => {
                    if let Some((op, size)) = at.remove(&e.address) {
                        let v = now.entry(op).or_default();
                        *v = v.saturating_sub(size);
                    }
                }
                _ => {}
            }
        }
        let mut ranked: Vec<(&str, u64)> = bytes.into_iter().collect();
        ranked.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
        Colours { index: ranked.iter().take(TOP_OPS).enumerate().map(|(i, (op, _))| (op.to_string(), i)).collect() }
    }

    /// The op's colour and the class that groups its drawings (`o3`; `oo` for the others).
    fn of_op(&self, op: &str) -> (&'static str, String) {
        match self.index.get(op) {
            Some(&i) => (PALETTE[i], format!("o{i}")),
            None => (OTHER, "oo".to_string()),
        }
    }

    fn named(&self) -> Vec<(&str, usize)> {
        let mut v: Vec<(&str, usize)> = self.index.iter().map(|(k, &i)| (k.as_str(), i)).collect();
        v.sort_by_key(|x| x.1);
        v
    }
}

const UNNAMED: &str = "unknown";

/// A point of the drawing over time: the event's number, its step, the bytes of each series.
/// The history sampled to at most [`SAMPLES`] points, each the highest of its stretch, by
/// series (the top ops, the others, what was live before the history began); the failures
/// (sample, request, op); and the live bytes at the end.
#[allow(clippy::type_complexity)]
fn samples(
    d: &Dump,
    events: &[&oomscope_format::EventInfo],
    colours: &Colours,
) -> (Vec<Sample>, Vec<(usize, u64, Option<String>)>, u64) {
    // Series: the top ops, the others, and what was live before the history began.
    let series = TOP_OPS + 2;
    let (others, earlier) = (TOP_OPS, TOP_OPS + 1);
    let slot = |op: Option<&str>| colours.index.get(op.unwrap_or(UNNAMED)).copied().unwrap_or(others);
    // What was live when the history began: the end's live bytes less what the history added.
    let end: u64 = d.live_chunks().map(|c| c.size).sum::<u64>().max(d.stats.bytes_in_use);
    let mut net: i128 = 0;
    for e in events {
        match e.kind {
            EventKind::Alloc => net += e.size as i128,
            EventKind::Free => net -= e.size as i128,
            _ => {}
        }
    }
    let mut state = vec![0u64; series];
    state[earlier] = (end as i128 - net).max(0) as u64;
    let mut live: HashMap<u64, (usize, u64)> = HashMap::new();
    let bucket = events.len().div_ceil(SAMPLES).max(1);
    // Each sample: (event number, step, the series), the highest point of its stretch.
    let mut samples: Vec<Sample> = Vec::new();
    let mut best: Option<(u64, Sample)> = None;
    let mut ooms: Vec<(usize, u64, Option<String>)> = Vec::new();
    for (i, e) in events.iter().enumerate() {
        match e.kind {
            EventKind::Alloc => {
                let s = slot(e.op.as_deref());
                state[s] += e.size;
                live.insert(e.address, (s, e.size));
            }
            EventKind::Free => match live.remove(&e.address) {
                Some((s, size)) => state[s] = state[s].saturating_sub(size),
                None => state[earlier] = state[earlier].saturating_sub(e.size),
            },
            EventKind::Oom => ooms.push((samples.len(), e.requested, e.op.clone())),
            _ => {}
        }
        let total: u64 = state.iter().sum();
        if best.as_ref().is_none_or(|(t, _)| total >= *t) {
            best = Some((total, (e.seq, e.step, state.clone())));
        }
        if ((i + 1) % bucket == 0 || i + 1 == events.len())
            && let Some((_, s)) = best.take()
        {
            samples.push(s);
        }
    }
    (samples, ooms, end)
}

type Sample = (u64, i64, Vec<u64>);

/// Live bytes by op over the dump's history, stacked: each op's series, the points' event
/// numbers and steps, and the failures.
fn timeline(d: &Dump, style: Style, colours: &Colours) -> Option<String> {
    let events: Vec<&oomscope_format::EventInfo> = d
        .events
        .iter()
        .filter(|e| matches!(e.kind, EventKind::Alloc | EventKind::Free | EventKind::Oom | EventKind::Step))
        .collect();
    if events.iter().filter(|e| matches!(e.kind, EventKind::Alloc | EventKind::Free)).count() < 2 {
        return None;
    }
    let (samples, ooms, end) = samples(d, &events, colours);
    let (others, earlier) = (TOP_OPS, TOP_OPS + 1);
    let top =
        samples.iter().map(|s| s.2.iter().sum::<u64>()).max().unwrap_or(0).max(d.stats.bytes_limit.min(end * 2)).max(1);
    let (h, left, bottom) = (240.0, 84.0, 22.0);
    let w = WIDTH - left;
    let n = samples.len().max(2) - 1;
    let x = |i: usize| left + i as f64 / n as f64 * w;
    let y = |b: u64| h - b as f64 / top as f64 * (h - 8.0);
    let mut o = format!(
        "<svg id=\"timeline-svg\" viewBox=\"0 0 {WIDTH} {}\" width=\"{WIDTH}\" height=\"{}\" role=\"img\"><title>live memory by op over {} events</title>",
        h + bottom,
        h + bottom,
        events.len()
    );
    // Axis: three levels of the memory.
    for f in [0.25, 0.5, 0.75, 1.0] {
        let b = (top as f64 * f) as u64;
        let _ = write!(
            o,
            "<line x1=\"{left}\" x2=\"{WIDTH}\" y1=\"{0:.1}\" y2=\"{0:.1}\" stroke=\"#eee\"/><text x=\"{1}\" y=\"{2:.1}\" text-anchor=\"end\">{3}</text>",
            y(b),
            left - 4.0,
            y(b) + 4.0,
            style.size(b)
        );
    }
    if d.stats.bytes_limit > 0 && d.stats.bytes_limit <= top {
        let _ = write!(
            o,
            "<line x1=\"{left}\" x2=\"{WIDTH}\" y1=\"{0:.1}\" y2=\"{0:.1}\" stroke=\"#e15759\" stroke-dasharray=\"4 3\"><title>the limit, {1}</title></line>",
            y(d.stats.bytes_limit),
            style.size(d.stats.bytes_limit)
        );
    }
    // The stacked areas, the earlier memory at the bottom.
    let order: Vec<usize> = std::iter::once(earlier).chain(0..TOP_OPS).chain(std::iter::once(others)).collect();
    let mut base = vec![0u64; samples.len()];
    let names = colours.named();
    for &s in &order {
        if samples.iter().all(|p| p.2[s] == 0) {
            continue;
        }
        let (fill, class, label) = if s == earlier {
            (EARLIER, "oe".to_string(), "live before the history began".to_string())
        } else if s == others {
            (OTHER, "oo".to_string(), "other ops".to_string())
        } else {
            let op = names.iter().find(|x| x.1 == s).map_or(UNNAMED, |x| x.0);
            (PALETTE[s], format!("o{s}"), op.to_string())
        };
        let mut path = String::new();
        for (i, p) in samples.iter().enumerate() {
            let _ = write!(path, "{}{:.1},{:.1}", if i == 0 { "M" } else { "L" }, x(i), y(base[i] + p.2[s]));
        }
        for i in (0..samples.len()).rev() {
            let _ = write!(path, "L{:.1},{:.1}", x(i), y(base[i]));
        }
        let peak = samples.iter().map(|p| p.2[s]).max().unwrap_or(0);
        let _ = write!(
            o,
            "<path class=\"{class}\" d=\"{path}Z\" fill=\"{fill}\"><title>{}: up to {}</title></path>",
            name(&label),
            style.size(peak)
        );
        for (i, p) in samples.iter().enumerate() {
            base[i] += p.2[s];
        }
    }
    // Steps on the axis: where each new step first shows, labels at least 56 pixels apart.
    let mut seen = i64::MIN;
    let mut last_label = f64::MIN;
    for (i, p) in samples.iter().enumerate() {
        if p.1 > seen {
            seen = p.1;
            let at = x(i);
            let _ = write!(o, "<line x1=\"{at:.1}\" x2=\"{at:.1}\" y1=\"{h}\" y2=\"{}\" stroke=\"#999\"/>", h + 4.0);
            if at - last_label >= 56.0 {
                let _ = write!(o, "<text x=\"{at:.1}\" y=\"{}\" text-anchor=\"middle\">step {}</text>", h + 16.0, p.1);
                last_label = at;
            }
        }
    }
    for (i, requested, op) in &ooms {
        let at = x((*i).min(samples.len().saturating_sub(1)));
        let _ = write!(
            o,
            "<line class=\"oom\" x1=\"{at:.1}\" x2=\"{at:.1}\" y1=\"0\" y2=\"{h}\" stroke=\"#c00\" stroke-width=\"2\"><title>out of memory: {} requested{}</title></line>",
            style.size(*requested),
            op.as_deref().map_or(String::new(), |op| format!(" by {}", name(op)))
        );
    }
    o.push_str("</svg><div class=\"legend\">");
    for (op, i) in &names {
        if samples.iter().any(|p| p.2[*i] > 0) {
            let _ = write!(o, "<span><i style=\"background:{}\"></i>{}</span>", PALETTE[*i], name(op));
        }
    }
    if samples.iter().any(|p| p.2[others] > 0) {
        let _ = write!(o, "<span><i style=\"background:{OTHER}\"></i>other ops</span>");
    }
    if samples.iter().any(|p| p.2[earlier] > 0) {
        let _ = write!(o, "<span><i style=\"background:{EARLIER}\"></i>live before the history began</span>");
    }
    if !ooms.is_empty() {
        o.push_str("<span><i style=\"background:#c00\"></i>out of memory</span>");
    }
    o.push_str("</div>");
    if d.events_total > d.events.len() as u64 {
        let _ = write!(
            o,
            "<p class=\"note\">The dump keeps the last {} of {} events; each point is the highest of its stretch.</p>",
            d.events.len(),
            d.events_total
        );
    }
    Some(o)
}

/// The nodes holding memory, largest first, with their kinds.
fn nodes(d: &Dump, style: Style, colours: &Colours) -> String {
    let mut kinds: HashMap<&str, HashMap<Kind, u64>> = HashMap::new();
    for c in d.live_chunks() {
        *kinds.entry(c.op.as_deref().unwrap_or(UNNAMED)).or_default().entry(c.kind()).or_default() += c.size;
    }
    let kind_of = |op: &str| {
        kinds
            .get(op)
            .and_then(|k| k.iter().max_by_key(|(k, b)| (**b, **k)).map(|(k, _)| *k))
            .unwrap_or_else(|| Kind::infer(op))
    };
    let total: u64 = d.usage_by_node.iter().map(|n| n.bytes).sum::<u64>().max(1);
    let mut o = String::from("<section id=\"nodes\"><h2>Live memory by node</h2>");
    if d.usage_by_node.is_empty() {
        o.push_str("<p class=\"note\">The input has no usage by node.</p></section>");
        return o;
    }
    o.push_str("<input id=\"filter\" hidden placeholder=\"filter by name\" aria-label=\"filter by name\"><table><tr><th class=\"n\">bytes</th><th class=\"n\">share</th><th class=\"n\">tensors</th><th>kind</th><th>node</th></tr>");
    for n in d.usage_by_node.iter().take(TABLE_ROWS) {
        let (colour, _) = colours.of_op(&n.op);
        let _ = write!(
            o,
            "<tr data-op=\"{op}\"><td class=\"n\">{}</td><td class=\"n\">{:.1}%</td><td class=\"n\">{}</td><td>{}</td><td class=\"op\"><i style=\"display:inline-block;width:9px;height:9px;background:{colour};margin-right:5px\"></i>{op}</td></tr>",
            style.size(n.bytes),
            n.bytes as f64 * 100.0 / total as f64,
            // A TF log's listing does not count the tensors.
            if n.count > 0 { n.count.to_string() } else { "-".to_string() },
            kind_of(&n.op).name(),
            op = name(&n.op)
        );
    }
    if d.usage_by_node.len() > TABLE_ROWS {
        let rest: u64 = d.usage_by_node[TABLE_ROWS..].iter().map(|n| n.bytes).sum();
        let _ = write!(
            o,
            "<tr><td class=\"n\">{}</td><td class=\"n\">{:.1}%</td><td></td><td></td><td>{} more nodes</td></tr>",
            style.size(rest),
            rest as f64 * 100.0 / total as f64,
            d.usage_by_node.len() - TABLE_ROWS
        );
    }
    o.push_str("</table></section>");
    o
}

/// The allocator's regions (segments), each a row as wide as its size against the largest,
/// each block where its bytes are: in use in its op's colour, free in white, named on hover.
fn map(d: &Dump, style: Style, colours: &Colours) -> Option<String> {
    let regions: Vec<&oomscope_format::RegionInfo> = d.regions.iter().filter(|r| !r.chunks.is_empty()).collect();
    if regions.is_empty() {
        return None;
    }
    let largest = regions.iter().map(|r| r.size).max().unwrap_or(1).max(1);
    let shown = regions.len().min(MAP_ROWS);
    let (row, gap, label) = (14.0, 4.0, 0.0);
    // Each row's share of the blocks drawn: narrower ones go together.
    let narrow = (WIDTH * shown as f64 / MAP_BLOCKS as f64).max(2.0);
    let height = shown as f64 * (row + gap) + 4.0;
    let mut o = format!(
        "<svg id=\"map-svg\" viewBox=\"0 0 {WIDTH} {height:.0}\" width=\"{WIDTH}\" height=\"{height:.0}\" role=\"img\"><title>the allocator's regions and their blocks</title>"
    );
    for (ri, r) in regions.iter().take(shown).enumerate() {
        let y0 = 2.0 + ri as f64 * (row + gap);
        let scale = (WIDTH - label) / largest as f64;
        let _ = write!(
            o,
            "<rect x=\"{label}\" y=\"{y0:.1}\" width=\"{:.1}\" height=\"{row}\" fill=\"{FREE}\" stroke=\"#ccc\"><title>region at {:#x}: {}{}</title></rect>",
            (r.size as f64 * scale).max(2.0),
            r.address,
            style.size(r.size),
            if r.expandable { ", expandable segment" } else { "" }
        );
        // Blocks narrower than two pixels (or than the row's share of the blocks drawn) are
        // drawn together.
        let mut pending: Option<(f64, f64, u64, u64, usize)> = None; // x0, x1, used, free, count
        let flush = |o: &mut String, p: (f64, f64, u64, u64, usize)| {
            let (x0, x1, used, free, count) = p;
            if used == 0 {
                return;
            }
            let _ = write!(
                o,
                "<rect x=\"{x0:.1}\" y=\"{y0:.1}\" width=\"{:.1}\" height=\"{row}\" fill=\"{OTHER}\"><title>{count} small blocks: {} in use, {} free</title></rect>",
                (x1 - x0).max(0.5),
                style.size(used),
                style.size(free)
            );
        };
        for c in &r.chunks {
            let x0 = label + c.address.saturating_sub(r.address) as f64 * scale;
            let x1 = x0 + c.size as f64 * scale;
            if x1 - x0 < narrow {
                let p = pending.get_or_insert((x0, x0, 0, 0, 0));
                p.1 = x1;
                if c.in_use {
                    p.2 += c.size;
                } else {
                    p.3 += c.size;
                }
                p.4 += 1;
                if p.1 - p.0 >= narrow {
                    flush(&mut o, pending.take().expect("just set"));
                }
                continue;
            }
            if let Some(p) = pending.take() {
                flush(&mut o, p);
            }
            if !c.in_use {
                continue;
            }
            let op = c.op.as_deref().unwrap_or(UNNAMED);
            let (colour, class) = colours.of_op(op);
            let mut tip = format!("{}: {}", name(op), style.size(c.size));
            if let Some(s) = &c.shape {
                let _ = write!(tip, ", shape {}", oomscope_base::shape::text(s));
            }
            let _ = write!(tip, ", {}", c.kind().name());
            if let Some(st) = c.step {
                let _ = write!(tip, ", step {st}");
            }
            let _ = write!(
                o,
                "<rect class=\"{class}\" x=\"{x0:.1}\" y=\"{y0:.1}\" width=\"{:.1}\" height=\"{row}\" fill=\"{colour}\"><title>{tip}</title></rect>",
                x1 - x0
            );
        }
        if let Some(p) = pending.take() {
            flush(&mut o, p);
        }
    }
    o.push_str("</svg>");
    if regions.len() > shown {
        let rest: u64 = regions[shown..].iter().map(|r| r.size).sum();
        let _ = write!(
            o,
            "<p class=\"note\">{} more regions with {} are not drawn.</p>",
            regions.len() - shown,
            style.size(rest)
        );
    }
    o.push_str("<div class=\"legend\">");
    for (op, i) in colours.named() {
        let _ = write!(o, "<span><i style=\"background:{}\"></i>{}</span>", PALETTE[i], name(op));
    }
    let _ = write!(
        o,
        "<span><i style=\"background:{OTHER}\"></i>other ops, or blocks too small to draw apart</span><span><i style=\"background:{FREE};outline:1px solid #ccc\"></i>free</span></div>"
    );
    Some(o)
}

/// Every rank side by side at the failure: a table, and a bar each of its memory by kind.
fn ranks(j: &JobReport, style: Style) -> String {
    let s = |n: u64| style.size(n);
    let mut kinds: Vec<Kind> = Vec::new();
    for r in &j.ranks {
        for k in &r.by_kind {
            if k.bytes > 0 && !kinds.contains(&k.kind) {
                kinds.push(k.kind);
            }
        }
    }
    let mut o = String::from(
        "<section id=\"ranks\"><h2>Every rank at the failure</h2><div class=\"wide\"><table><tr><th>rank</th><th>host</th><th class=\"n\">GPU</th><th>dump</th><th class=\"n\">allocated</th><th class=\"n\">reserved</th><th class=\"n\">peak</th><th class=\"n\">step</th>",
    );
    for k in &kinds {
        let _ = write!(o, "<th class=\"n\">{}</th>", k.plural());
    }
    o.push_str("</tr>");
    for r in &j.ranks {
        let _ = write!(
            o,
            "<tr{}><td>{}{}</td><td>{}</td><td class=\"n\">{}</td><td>{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td>",
            if r.oom { " class=\"failed\"" } else { "" },
            r.rank,
            if j.first_failure.as_ref().is_some_and(|f| f.rank == r.rank) { " (failed first)" } else { "" },
            name(&r.host),
            r.gpu.map_or("-".to_string(), |g| g.to_string()),
            if r.oom { "OOM" } else { "state" },
            s(r.allocated),
            s(r.reserved),
            s(r.peak),
            r.step
        );
        for k in &kinds {
            let b = r.by_kind.iter().find(|x| x.kind == *k).map_or(0, |x| x.bytes);
            let _ = write!(o, "<td class=\"n\">{}</td>", s(b));
        }
        o.push_str("</tr>");
    }
    o.push_str("</table></div>");
    // The bars: one per rank, as long as its reserved memory against the largest.
    let most = j.ranks.iter().map(|r| r.reserved.max(r.allocated)).max().unwrap_or(1).max(1);
    let (row, gap, left) = (16.0, 6.0, 90.0);
    let height = j.ranks.len() as f64 * (row + gap) + 4.0;
    let _ = write!(
        o,
        "<svg id=\"ranks-svg\" viewBox=\"0 0 {WIDTH} {height:.0}\" width=\"{WIDTH}\" height=\"{height:.0}\" role=\"img\"><title>every rank's memory by kind</title>"
    );
    let scale = (WIDTH - left) / most as f64;
    for (i, r) in j.ranks.iter().enumerate() {
        let y0 = 2.0 + i as f64 * (row + gap);
        let _ = write!(
            o,
            "<text x=\"0\" y=\"{:.1}\">rank {}{}</text><rect x=\"{left}\" y=\"{y0:.1}\" width=\"{:.1}\" height=\"{row}\" fill=\"{FREE}\" stroke=\"#ccc\"><title>rank {}: {} reserved</title></rect>",
            y0 + 12.0,
            r.rank,
            if r.oom { " OOM" } else { "" },
            (r.reserved as f64 * scale).max(1.0),
            r.rank,
            s(r.reserved)
        );
        let mut x = left;
        for k in &r.by_kind {
            let w = k.bytes as f64 * scale;
            let _ = write!(
                o,
                "<rect x=\"{x:.1}\" y=\"{y0:.1}\" width=\"{w:.1}\" height=\"{row}\" fill=\"{}\"><title>rank {}: {} {}</title></rect>",
                kind_colour(k.kind),
                r.rank,
                k.kind.plural(),
                s(k.bytes)
            );
            x += w;
        }
    }
    o.push_str("</svg><div class=\"legend\">");
    for k in &kinds {
        let _ = write!(o, "<span><i style=\"background:{}\"></i>{}</span>", kind_colour(*k), k.plural());
    }
    o.push_str("</div></section>");
    o
}

#[cfg(test)]
mod tests {
    use super::*;
    use oomscope_format::{ChunkInfo, EventInfo, NodeUsage, RegionInfo};

    fn dump_with(chunks: usize) -> Dump {
        let size = 4096u64;
        let mut d = Dump::default();
        let chunk = |i: usize| ChunkInfo {
            address: i as u64 * size,
            size,
            requested: size,
            in_use: !i.is_multiple_of(3),
            op: Some(format!("layer{}/<b>", i % 17)),
            ..ChunkInfo::default()
        };
        d.regions = vec![RegionInfo {
            address: 0,
            size: chunks as u64 * size,
            chunks: (0..chunks).map(chunk).collect(),
            ..RegionInfo::default()
        }];
        d.events = (0..chunks)
            .map(|i| EventInfo {
                seq: i as u64,
                t_ns: i as u64,
                kind: EventKind::Alloc,
                address: i as u64 * size,
                size,
                requested: size,
                op: Some(format!("layer{}/<b>", i % 17)),
                step: (i / 1000) as i64,
            })
            .collect();
        d.events_total = d.events.len() as u64;
        d.usage_by_node = (0..17)
            .map(|i| NodeUsage { op: format!("layer{i}/<b>"), bytes: 1000 - i, requested: 0, count: 1 })
            .collect();
        d
    }

    #[test]
    fn names_are_escaped_and_nothing_is_fetched() {
        let p = page(&dump_with(100));
        assert!(p.contains("layer1/&lt;b&gt;") && !p.contains("layer1/<b>"));
        assert!(!p.contains("http://") && !p.contains("https://") && !p.contains(" src="));
        assert!(p.contains("default-src 'none'"));
    }

    #[test]
    fn many_wide_blocks_with_long_names_make_a_page_of_bounded_size() {
        // 200 regions of 480 blocks each two pixels wide or more (96 000 drawable blocks), all
        // named by one 2 KB frame: each tooltip once repeated the whole name.
        let long = format!("/very/long/path/{}.py:1:forward", "x".repeat(2000));
        let d = Dump {
            regions: (0..200u64)
                .map(|r| oomscope_format::RegionInfo {
                    address: r << 32,
                    size: 480 * 4096,
                    chunks: (0..480u64)
                        .map(|i| oomscope_format::ChunkInfo {
                            address: (r << 32) + i * 4096,
                            size: 4096,
                            requested: 4096,
                            in_use: true,
                            op: Some(long.clone()),
                            ..oomscope_format::ChunkInfo::default()
                        })
                        .collect(),
                    ..oomscope_format::RegionInfo::default()
                })
                .collect(),
            ..Dump::default()
        };
        let p = page(&d);
        assert!(p.len() < 8_000_000, "{} bytes", p.len());
        assert!(p.matches("<rect").count() <= MAP_BLOCKS + 2 * 200 + 100, "{}", p.matches("<rect").count());
        assert!(!p.contains(&long) && p.contains("xxx…"), "names are cut");
    }

    #[test]
    fn a_million_blocks_make_a_page_of_bounded_size() {
        let small = page(&dump_with(1_000)).len();
        let large = page(&dump_with(1_000_000)).len();
        // The history is sampled and the map draws what a pixel can show.
        assert!(large < 3 * small.max(200_000), "{small} bytes for 1k blocks, {large} for 1M");
        assert!(large < 2_000_000, "{large}");
    }
}
