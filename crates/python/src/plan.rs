//! `memplan.plan`, `memplan.Plan` (its figures, buffers, report, plan file and pictures) and
//! `memplan.check` (the verifier and the host pattern check).

use std::collections::HashMap;
use std::sync::OnceLock;

use memplan::check::CheckSettings;
use memplan::options::PlanSettings;
use memplan::plan::Planned;
use memplan_planner::AliasKind;
use pyo3::prelude::*;
use pyo3::types::PyDict;

use crate::args::{Source, apply, source};
use crate::error::{IntoPy as _, input, raise};
use crate::graph::{Graph, graph_arg, json_to_py};

/// A plan: every buffer's place in one arena, the device memory it needs, and how it was
/// made. `report()` is the text `memplan plan` prints, `to_json()` / `save()` its plan file,
/// `svg()` / `html()` its pictures; in Jupyter a plan shows its picture.
#[pyclass(module = "memplan", name = "Plan", frozen)]
#[derive(Debug)]
pub struct Plan {
    planned: Planned,
    notes: Vec<String>,
    /// Module paths by node name (set by `memplan.torch`).
    modules: OnceLock<HashMap<String, String>>,
}

/// One planned buffer: a tensor's place in the arena and its lifetime (steps `first` to
/// `last`, inclusive).
#[pyclass(module = "memplan", name = "Buffer", frozen, get_all)]
#[derive(Clone, Debug)]
pub struct Buffer {
    /// The tensor's name.
    pub tensor: String,
    /// The tensor's id (its index in the graph).
    pub tensor_id: u32,
    /// First byte in the arena.
    pub offset: u64,
    /// Size in bytes.
    pub bytes: u64,
    /// First step it is live.
    pub first: u32,
    /// Last step it is live (inclusive).
    pub last: u32,
    /// `"view"`, `"inplace"` or `"part"` when it shares another tensor's bytes, else `None`.
    pub alias: Option<String>,
    /// The tensor whose bytes it shares, if it does.
    pub parent: Option<String>,
    /// `input`, `output`, `activation`, ...
    pub kind: String,
    /// The element type.
    pub dtype: String,
    /// The shape as the graph writes it.
    pub shape: String,
    /// The op that produced it (`input` for a graph input).
    pub op: String,
    /// The node that produced it, if one did.
    pub node: Option<String>,
    /// The module path of that node (`layers.0.attn`), where the exporter recorded it.
    pub module: Option<String>,
}

#[pymethods]
impl Buffer {
    fn __repr__(&self) -> String {
        format!(
            "<memplan.Buffer {:?}: {} bytes at {}, steps {}-{}{}>",
            self.tensor,
            self.bytes,
            self.offset,
            self.first,
            self.last,
            self.alias.as_ref().map_or_else(String::new, |a| format!(
                ", {a} of {:?}",
                self.parent.as_deref().unwrap_or("?")
            ))
        )
    }
}

/// Plans `source` (a `Graph`, a path, bytes or an `onnx.ModelProto`; `None`: the embedded
/// DenseNet-121) as `memplan plan` does, with its options as keywords: `dims`,
/// `schedule` ("given", "memory"), `strategy`, `inplace`, `views`, `concat_elision`,
/// `fold_weights`, `attention`, `fuse` ("all", "attention,conv-add", ...), `opaque`,
/// `align`, `caller_inputs`, `caller_outputs`, `bound`, `persistent`, `parameters`,
/// `verify`, and for a training step `training` ("sgd", "momentum", "adam", "adamw"),
/// `loss`, `fused_optimizer`, `accumulate`, `optimizer_kernel`, `checkpoint`,
/// `training_unknown`, `frozen`, `budget`, `master_weights`. The plan is checked by the
/// independent verifier (`UnsafePlanError` if it fails; `verify=False` skips it).
///
/// >>> p = memplan.plan("model.onnx", dims={"batch": 8}, schedule="memory")
/// >>> p.total_bytes, p.arena_bytes, p.lower_bound_bytes
/// >>> step = memplan.plan("model.onnx", dims={"batch": 8}, training="adamw",
/// ...                     checkpoint="auto", budget="24GiB")
#[pyfunction]
#[pyo3(signature = (source=None, **options))]
pub fn plan(
    py: Python<'_>,
    source: Option<&Bound<'_, PyAny>>,
    options: Option<&Bound<'_, PyDict>>,
) -> PyResult<Plan> {
    let graph = graph_arg(py, source)?;
    let mut settings = PlanSettings::default();
    apply(options, |k, v| settings.set(k, v))?;
    // The graph's own dims first, then the call's.
    let mut dims = graph.dims.clone();
    dims.append(&mut settings.dims);
    settings.dims = memplan::load::unique_dims(&dims).py(py)?;
    let Graph { graph, .. } = graph;
    let (planned, notes) = py
        .detach(|| -> memplan::Result<(Planned, Vec<String>)> {
            let mut notes = Vec::new();
            let (graph, options) = memplan::load::prepare(graph, &settings, &mut notes)?;
            let planned = memplan::plan::plan(&graph, &settings, &options)?;
            Ok((planned, notes))
        })
        .py(py)?;
    Ok(Plan {
        planned,
        notes,
        modules: OnceLock::new(),
    })
}

impl Plan {
    /// A plan made by the facade, with its notes.
    pub fn new(planned: Planned, notes: Vec<String>) -> Plan {
        Plan {
            planned,
            notes,
            modules: OnceLock::new(),
        }
    }

    fn buffer(
        &self,
        b: &memplan_planner::PlannedBuffer,
        producers: &[Option<memplan_ir::NodeId>],
    ) -> Buffer {
        let graph = self.planned.graph();
        let tensor = graph.tensors().get(b.tensor);
        let node = producers
            .get(b.tensor.0 as usize)
            .copied()
            .flatten()
            .and_then(|n| graph.nodes().get(n));
        let module = node.and_then(|n| self.modules.get()?.get(&n.name).cloned());
        Buffer {
            tensor: tensor.map_or_else(|| format!("t{}", b.tensor.0), |t| t.name.clone()),
            tensor_id: b.tensor.0,
            offset: b.offset,
            bytes: b.bytes,
            first: b.first,
            last: b.last,
            alias: b.alias_kind().map(|k| {
                match k {
                    AliasKind::View => "view",
                    AliasKind::InPlace => "inplace",
                    AliasKind::Part => "part",
                }
                .to_owned()
            }),
            parent: b
                .parent()
                .and_then(|p| graph.tensors().get(p))
                .map(|t| t.name.clone()),
            kind: tensor.map_or("activation", |t| t.kind.name()).to_owned(),
            dtype: tensor.map_or_else(String::new, |t| t.dtype.to_string()),
            shape: tensor.map_or_else(String::new, |t| memplan::inspect::shape(graph, t)),
            op: node.map_or_else(|| "input".to_owned(), |n| n.op.clone()),
            node: node.map(|n| n.name.clone()),
            module,
        }
    }

    fn device(&self, py: Python<'_>) -> PyResult<memplan_planner::DeviceBytes> {
        self.planned
            .plan()
            .device_bytes(self.planned.graph())
            .map_err(|e| input(py, e.to_string()))
    }
}

#[pymethods]
impl Plan {
    /// The name of the graph planned.
    #[getter]
    fn graph_name(&self) -> String {
        self.planned.plan().graph.clone()
    }

    /// The graph planned: the one given, or the training step's (forward, loss, backward,
    /// optimizer).
    #[getter]
    fn graph(&self) -> Graph {
        Graph {
            graph: self.planned.graph().clone(),
            dims: Vec::new(),
        }
    }

    /// Device memory in all: the arena, the weight (or persistent) region, and the inputs
    /// and outputs the caller owns.
    #[getter]
    fn total_bytes(&self, py: Python<'_>) -> PyResult<u64> {
        Ok(self.device(py)?.total)
    }

    /// The activation arena: one block every activation lives in, its bytes reused.
    #[getter]
    fn arena_bytes(&self) -> u64 {
        self.planned.plan().arena_bytes
    }

    /// The most bytes live at one step: no placement of this schedule needs less.
    #[getter]
    fn lower_bound_bytes(&self) -> u64 {
        self.planned.plan().lower_bound_bytes
    }

    /// The weight region (for a training step: parameters, gradients, optimizer state).
    #[getter]
    fn weight_bytes(&self) -> u64 {
        self.planned.plan().weight_bytes
    }

    /// Every tensor in a buffer of its own, as one allocation per tensor would need.
    #[getter]
    fn naive_bytes(&self) -> u64 {
        self.planned.plan().naive_bytes
    }

    /// Graph inputs the caller allocates (with `caller_inputs=True`).
    #[getter]
    fn caller_input_bytes(&self, py: Python<'_>) -> PyResult<u64> {
        Ok(self.device(py)?.caller_inputs)
    }

    /// Graph outputs the caller allocates (with `caller_outputs=True`).
    #[getter]
    fn caller_output_bytes(&self, py: Python<'_>) -> PyResult<u64> {
        Ok(self.device(py)?.caller_outputs)
    }

    /// Steps in the schedule.
    #[getter]
    fn steps(&self) -> usize {
        self.planned.plan().schedule.len()
    }

    /// The node run at each step, by name.
    #[getter]
    fn schedule(&self) -> Vec<String> {
        let graph = self.planned.graph();
        self.planned
            .plan()
            .schedule
            .iter()
            .map(|&n| {
                graph
                    .nodes()
                    .get(n)
                    .map_or_else(String::new, |n| n.name.clone())
            })
            .collect()
    }

    /// Every planned buffer, in tensor order.
    #[getter]
    fn buffers(&self) -> Vec<Buffer> {
        let producers: Vec<Option<memplan_ir::NodeId>> =
            self.planned.graph().producers().iter().copied().collect();
        self.planned
            .plan()
            .buffers
            .iter()
            .map(|b| self.buffer(b, &producers))
            .collect()
    }

    /// The training step's figures (the plan file's `training` object), or `None`.
    #[getter]
    fn training<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyAny>>> {
        match self.planned.training() {
            None => Ok(None),
            Some((step, options)) => {
                json_to_py(py, &memplan::training::training_json(step, options)).map(Some)
            }
        }
    }

    /// Whether the independent plan verifier passed the plan (`verify=False`: not run).
    #[getter]
    fn verified(&self) -> bool {
        self.planned.verified
    }

    /// What planning assumed or noticed (a size planned at its bound, inputs found to be
    /// training state), one line each.
    #[getter]
    fn notes(&self) -> Vec<String> {
        self.notes.clone()
    }

    /// The text report `memplan plan` prints, listing the `top` largest buffers.
    #[pyo3(signature = (top=10))]
    fn report(&self, py: Python<'_>, top: usize) -> PyResult<String> {
        if top == 0 {
            return Err(input(py, "top=0 lists nothing: give at least 1"));
        }
        py.detach(|| self.planned.report(top)).py(py)
    }

    /// The plan file: byte for byte what `memplan plan --format json` writes.
    fn to_json(&self, py: Python<'_>) -> PyResult<String> {
        py.detach(|| self.planned.to_json()).py(py)
    }

    /// The plan file as a dict.
    fn as_dict<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let text = self.to_json(py)?;
        py.import("json")?.call_method1("loads", (text,))
    }

    /// Writes the plan file to `path` (a temporary file renamed over it: never half a
    /// file).
    fn save(&self, py: Python<'_>, path: &Bound<'_, PyAny>) -> PyResult<()> {
        let Source::Path(path) = source(path, "the path")? else {
            return Err(input(py, "save() takes a path"));
        };
        py.detach(|| {
            let text = self.planned.to_json()?;
            memplan::output::write_atomically(std::path::Path::new(&path), text.as_bytes())
        })
        .py(py)
    }

    /// The plan drawn as SVG: steps across, addresses up (`memplan plan --svg`).
    fn svg(&self, py: Python<'_>) -> String {
        py.detach(|| self.planned.svg())
    }

    /// The plan drawn as one self-contained HTML page with hover, zoom and search
    /// (`memplan plan --html`).
    fn html(&self, py: Python<'_>) -> String {
        py.detach(|| self.planned.html())
    }

    /// The HTML page inline, for Jupyter.
    fn _repr_html_(&self, py: Python<'_>) -> String {
        let page = self.html(py);
        let escaped = page.replace('&', "&amp;").replace('"', "&quot;");
        format!(
            "<iframe srcdoc=\"{escaped}\" style=\"width: 100%; height: 760px; border: 0\" sandbox=\"allow-scripts\" title=\"memplan plan of {}\"></iframe>",
            memplan::picture::svg::escape(&self.planned.plan().graph)
        )
    }

    /// Sets the module path of each node by name (for `memplan.torch`), once.
    fn _set_modules(&self, modules: HashMap<String, String>) -> bool {
        self.modules.set(modules).is_ok()
    }

    fn __repr__(&self) -> String {
        let p = self.planned.plan();
        let total = p
            .device_bytes(self.planned.graph())
            .map_or_else(|_| "?".to_owned(), |d| memplan::size(d.total));
        format!(
            "<memplan.Plan of {:?}: {} in all, arena {} (lower bound {}), {} buffers, {} steps{}>",
            p.graph,
            total,
            memplan::size(p.arena_bytes),
            memplan::size(p.lower_bound_bytes),
            p.buffers.len(),
            p.schedule.len(),
            if self.planned.training().is_some() {
                ", a training step"
            } else {
                ""
            }
        )
    }
}

/// What `memplan.check` found: the text `memplan check` prints, the figures as a dict.
#[pyclass(module = "memplan", name = "CheckReport", frozen)]
#[derive(Debug)]
pub struct CheckReport {
    outcome: memplan::check::CheckOutcome,
}

#[pymethods]
impl CheckReport {
    /// Every byte held and the verifier passed the plan.
    #[getter]
    fn ok(&self) -> bool {
        self.outcome.ok
    }

    /// Whether the plan's bytes were run on the host arena.
    #[getter]
    fn executed(&self) -> bool {
        self.outcome.executed
    }

    /// The text `memplan check` prints.
    fn report(&self) -> String {
        self.outcome.text.clone()
    }

    /// The figures, the verifier's problems and the clobbered tensors
    /// (`memplan check --format json`).
    fn as_dict<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        json_to_py(py, &self.outcome.json)
    }

    fn __bool__(&self) -> bool {
        self.outcome.ok
    }

    fn __repr__(&self) -> String {
        let first = self.outcome.text.lines().last().unwrap_or("");
        format!(
            "<memplan.CheckReport ok={}: {first}>",
            if self.outcome.ok { "True" } else { "False" }
        )
    }
}

/// Checks a plan: the independent verifier, then the plan run on a host arena with the
/// byte-pattern check (options `half_weights`, `sample`, `threads`, `max_report`,
/// `check_weights`, `strict`, as `memplan check`'s flags). `plan` is a `Plan` (its graph is used; `graph` may be left out) or a
/// plan file (a path or its text as bytes) of `graph`. Raises `UnsafePlanError` (its
/// `report` attribute the `CheckReport`) when the plan is unsafe.
///
/// >>> memplan.check(memplan.plan("model.onnx")).ok
/// True
/// >>> memplan.check("model.onnx", "plan.json", sample=65536)
#[pyfunction]
#[pyo3(signature = (graph=None, plan=None, **options))]
pub fn check(
    py: Python<'_>,
    graph: Option<&Bound<'_, PyAny>>,
    plan: Option<&Bound<'_, PyAny>>,
    options: Option<&Bound<'_, PyDict>>,
) -> PyResult<CheckReport> {
    let mut settings = CheckSettings::default();
    apply(options, |k, v| settings.set(k, v))?;
    // check(plan) alone.
    let (graph, plan) = match (graph, plan) {
        (Some(g), None) if g.cast::<Plan>().is_ok() => (None, Some(g)),
        other => other,
    };
    let Some(plan) = plan else {
        return Err(crate::error::option(
            py,
            "check() needs a plan: check(graph, plan)",
        ));
    };
    let outcome = if let Ok(p) = plan.cast::<Plan>() {
        let p = p.get();
        if let Some(g) = graph.and_then(|g| g.cast::<Graph>().ok()) {
            let given = &g.get().graph.name;
            if p.planned.training().is_none() && *given != p.planned.graph().name {
                return Err(input(
                    py,
                    format!(
                        "the plan is of graph `{}`, not `{given}`",
                        p.planned.graph().name
                    ),
                ));
            }
        }
        py.detach(|| {
            memplan::check::check(
                p.planned.graph(),
                p.planned.plan(),
                &settings,
                &mut |_, _| {},
            )
        })
        .py(py)?
    } else {
        let Some(graph) = graph else {
            return Err(crate::error::option(
                py,
                "checking a plan file needs its graph: check(graph, plan)",
            ));
        };
        let (text, label) = match source(plan, "the plan")? {
            Source::Path(path) => (
                py.detach(|| std::fs::read_to_string(&path))
                    .map_err(|e| input(py, format!("reading {path}: {e}")))?,
                path,
            ),
            Source::Bytes(bytes) => (
                String::from_utf8(bytes)
                    .map_err(|_| input(py, "the plan file given is not UTF-8 JSON"))?,
                "the plan given".to_owned(),
            ),
        };
        let graph = graph_arg(py, Some(graph))?;
        py.detach(|| -> memplan::Result<_> {
            let Graph { mut graph, dims } = graph;
            memplan::training::mark_persistent(&mut graph, &[], &mut memplan::Quiet)?;
            let options = PlanSettings::default().plan_options(&mut memplan::Quiet)?;
            let loaded = memplan::check::load_plan(graph, &text, &label, options, &dims)?;
            memplan::check::check_with(
                &loaded.graph,
                &loaded.plan,
                loaded.figures,
                &settings,
                &mut |_, _| {},
            )
        })
        .py(py)?
    };
    let report = CheckReport { outcome };
    if report.outcome.ok {
        return Ok(report);
    }
    let summary: Vec<&str> = report.outcome.text.lines().take(6).collect();
    let err = raise(py, "UnsafePlanError", summary.join("\n"));
    err.value(py).setattr("report", Py::new(py, report)?)?;
    Err(err)
}
