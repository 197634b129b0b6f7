//! `memplan.load` and `memplan.Graph`: a graph read from memplan JSON or ONNX (told apart by
//! content) with its symbols' values, its summary (`inspect()`), symbols and sizes.

use memplan::load::Origin;
use pyo3::prelude::*;
use pyo3::types::PyDict;

use crate::args::{Source, source, value};
use crate::error::IntoPy as _;

/// A computation graph: memplan's IR, read from memplan JSON or ONNX, with values for some
/// of its shape symbols (`dims`).
///
/// >>> g = memplan.load("model.onnx", dims={"batch": 8})
/// >>> g.symbols
/// ['batch', 'seq']
/// >>> print(g.inspect())
#[pyclass(module = "memplan", name = "Graph", frozen)]
#[derive(Clone, Debug)]
pub struct Graph {
    /// The graph, symbols kept.
    pub graph: memplan_ir::Graph,
    /// The values given for its symbols.
    pub dims: Vec<(String, u64)>,
}

/// Reads a graph from `source`, a path or bytes (`None`: the embedded DenseNet-121).
pub fn read(py: Python<'_>, src: Option<&Bound<'_, PyAny>>) -> PyResult<memplan_ir::Graph> {
    let Some(src) = src else {
        return py.detach(memplan::load::default_graph).py(py);
    };
    match source(src, "the graph")? {
        Source::Path(path) => py
            .detach(|| memplan::load::load_graph(Some(std::path::Path::new(&path))))
            .py(py),
        Source::Bytes(bytes) => py
            .detach(|| memplan::load::load_bytes(bytes, Origin::Memory))
            .py(py),
    }
}

/// `dims` as symbol values: a dict of names to non-negative integers.
pub fn dims(dims: Option<&Bound<'_, PyAny>>) -> PyResult<Vec<(String, u64)>> {
    let Some(d) = dims else {
        return Ok(Vec::new());
    };
    let py = d.py();
    memplan::options::as_dims("dims", &value("dims", d)?).py(py)
}

/// A graph argument: a `Graph`, or a source to load.
pub fn graph_arg(py: Python<'_>, v: Option<&Bound<'_, PyAny>>) -> PyResult<Graph> {
    if let Some(g) = v.and_then(|v| v.cast::<Graph>().ok()) {
        return Ok(g.get().clone());
    }
    Ok(Graph {
        graph: read(py, v)?,
        dims: Vec::new(),
    })
}

/// Loads a graph: a path to memplan JSON or ONNX (told apart by content), `bytes` of
/// either, or an `onnx.ModelProto`; `None` loads the embedded DenseNet-121. `dims` gives
/// values to shape symbols (`{"batch": 8}`), checked against the graph.
///
/// >>> g = memplan.load("gpt2.onnx", dims={"batch": 4})
/// >>> g.symbols, g.sizes["weight"]
/// (['batch', 'seq'], 58805449)
#[pyfunction]
#[pyo3(signature = (source=None, dims=None))]
pub fn load(
    py: Python<'_>,
    source: Option<&Bound<'_, PyAny>>,
    dims: Option<&Bound<'_, PyAny>>,
) -> PyResult<Graph> {
    let dims = self::dims(dims)?;
    let graph = read(py, source)?;
    // Every name must be a symbol of the graph, each given once.
    memplan::load::bindings(&graph, &dims).py(py)?;
    Ok(Graph { graph, dims })
}

impl Graph {
    /// The graph with its dims bound (sizes that depend on other symbols stay formulas).
    fn bound(&self, py: Python<'_>) -> PyResult<memplan_ir::Graph> {
        let (graph, dims) = (self.graph.clone(), self.dims.clone());
        py.detach(|| memplan::load::bind_dims(graph, &dims, false))
            .py(py)
    }

    fn inspect_json(&self, py: Python<'_>, top: usize) -> PyResult<serde_json::Value> {
        let bound = self.bound(py)?;
        py.detach(|| memplan::inspect::json_value(&bound, top))
            .py(py)
    }
}

/// A JSON value as a Python object.
pub fn json_to_py<'py>(py: Python<'py>, v: &serde_json::Value) -> PyResult<Bound<'py, PyAny>> {
    py.import("json")?.call_method1("loads", (v.to_string(),))
}

#[pymethods]
impl Graph {
    /// The graph's name (an ONNX file's stem).
    #[getter]
    fn name(&self) -> String {
        self.graph.name.clone()
    }

    /// The shape symbols, in the graph's order (`["batch", "seq"]`).
    #[getter]
    fn symbols(&self) -> Vec<String> {
        self.graph.symbols().iter().cloned().collect()
    }

    /// The values given for symbols (`{"batch": 8}`).
    #[getter]
    fn dims<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let out = PyDict::new(py);
        for (n, v) in &self.dims {
            out.set_item(n, v)?;
        }
        Ok(out)
    }

    /// Nodes in the graph.
    #[getter]
    fn num_nodes(&self) -> usize {
        self.graph.nodes().len()
    }

    /// Tensors in the graph.
    #[getter]
    fn num_tensors(&self) -> usize {
        self.graph.tensors().len()
    }

    /// Bytes by kind of tensor (`input`, `output`, `activation`, `weight`, ...): an int, or
    /// a formula in the symbols left unbound (`"3072*batch*seq + 4096"`).
    #[getter]
    fn sizes<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let v = self.inspect_json(py, 1)?;
        let out = PyDict::new(py);
        for k in v["bytes_by_kind"].as_array().into_iter().flatten() {
            let kind = k["kind"].as_str().unwrap_or("?");
            let fixed = k["bytes"].as_u64().unwrap_or(0);
            match k["symbolic_bytes_formula"].as_str() {
                Some(f) if fixed > 0 => out.set_item(kind, format!("{f} + {fixed}"))?,
                Some(f) => out.set_item(kind, f)?,
                None => out.set_item(kind, fixed)?,
            }
        }
        Ok(out)
    }

    /// The summary `memplan inspect` prints: nodes, tensors, bytes by kind, the `top`
    /// largest tensors, the ops.
    #[pyo3(signature = (top=10))]
    fn inspect(&self, py: Python<'_>, top: usize) -> PyResult<String> {
        let bound = self.bound(py)?;
        py.detach(|| memplan::inspect::text(&bound, top.max(1)))
            .py(py)
    }

    /// The summary as a dict (`memplan inspect --format json`).
    #[pyo3(signature = (top=10))]
    fn inspect_dict<'py>(&self, py: Python<'py>, top: usize) -> PyResult<Bound<'py, PyAny>> {
        let v = self.inspect_json(py, top.max(1))?;
        json_to_py(py, &v)
    }

    /// The graph in memplan's JSON graph format.
    fn to_json(&self) -> String {
        self.graph.to_json()
    }

    fn __repr__(&self) -> String {
        let dims: Vec<String> = self.dims.iter().map(|(n, v)| format!("{n}={v}")).collect();
        format!(
            "<memplan.Graph {:?}: {} nodes, {} tensors, symbols [{}]{}>",
            self.graph.name,
            self.graph.nodes().len(),
            self.graph.tensors().len(),
            self.symbols().join(", "),
            if dims.is_empty() {
                String::new()
            } else {
                format!(", dims {}", dims.join(", "))
            }
        )
    }
}
