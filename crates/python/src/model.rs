//! `memplan.estimate`, `memplan.fit` and `memplan.serving`: a model's memory from its config
//! (a path, a dict, or a `transformers` config), the largest batch or context that fits a
//! budget (from a config's estimate, or by planning a graph), and a serving engine's KV
//! cache. Results carry the command's figures as attributes, `as_dict()` (its JSON) and
//! `report()` (its text).

use memplan::estimate::WorkloadSettings;
use memplan::fit::ServingSettings;
use memplan::options::{PlanSettings, Value, as_size};
use memplan_tracker::estimate::TransformerConfig;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyString};

use crate::args::{apply, fspath, type_name, value};
use crate::error::{IntoPy as _, input, option, raise};
use crate::graph::{Graph, json_to_py};

/// A model config given as a path, a dict, a JSON text or an object with `to_dict()`
/// (a `transformers` config): its JSON text and a label for errors.
fn config_text(py: Python<'_>, config: &Bound<'_, PyAny>) -> PyResult<(String, String)> {
    if config.is_instance_of::<PyString>() || config.hasattr("__fspath__")? {
        let path: String = match fspath(config)? {
            Some(p) => p,
            None => config.extract()?,
        };
        let text = py
            .detach(|| std::fs::read_to_string(&path))
            .map_err(|e| input(py, format!("reading {path}: {e}")))?;
        return Ok((text, path));
    }
    let dict = if config.is_instance_of::<PyDict>() {
        config.clone()
    } else if config.hasattr("to_dict")? {
        config.call_method0("to_dict")?
    } else {
        return Err(option(
            py,
            format!(
                "the config must be a path, a dict or a transformers config (anything with to_dict()), not {}",
                type_name(config)
            ),
        ));
    };
    let json = py.import("json")?;
    let kwargs = PyDict::new(py);
    // A transformers config holds a few objects JSON has no type for (a torch dtype).
    kwargs.set_item("default", py.import("builtins")?.getattr("str")?)?;
    let text: String = json
        .call_method("dumps", (dict,), Some(&kwargs))?
        .extract()?;
    Ok((text, "the config given".to_owned()))
}

/// A config read with its notes.
fn load_config(
    py: Python<'_>,
    config: &Bound<'_, PyAny>,
    notes: &mut Vec<String>,
) -> PyResult<TransformerConfig> {
    let (text, label) = config_text(py, config)?;
    memplan::estimate::config_from_json(&text, &label, notes).py(py)
}

/// The figures of a result: its JSON and its text.
#[derive(Debug)]
struct Figures {
    json: serde_json::Value,
    text: String,
    notes: Vec<String>,
}

impl Figures {
    fn int(&self, key: &str) -> Option<u64> {
        self.json.get(key).and_then(serde_json::Value::as_u64)
    }
}

/// A transformer's memory: parameters, weights, KV cache, activations, gradients,
/// optimizer states and their total (per device too, with parallelism), as
/// `memplan estimate` reports them.
#[pyclass(module = "memplan", name = "Estimate", frozen)]
#[derive(Debug)]
pub struct Estimate {
    figures: Figures,
}

macro_rules! int_getters {
    ($ty:ty { $($(#[$doc:meta])* $name:ident),* $(,)? } $($extra:tt)*) => {
        #[pymethods]
        impl $ty {
            $(
                $(#[$doc])*
                #[getter]
                fn $name(&self) -> Option<u64> {
                    self.figures.int(stringify!($name))
                }
            )*

            /// Every figure, as `--format json` writes it.
            fn as_dict<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
                json_to_py(py, &self.figures.json)
            }

            /// The text the command prints.
            fn report(&self) -> String {
                self.figures.text.clone()
            }

            /// What was assumed (a dtype, a context limit), one line each.
            #[getter]
            fn notes(&self) -> Vec<String> {
                self.figures.notes.clone()
            }

            fn __str__(&self) -> String {
                self.figures.text.clone()
            }

            fn _repr_pretty_(&self, p: &Bound<'_, PyAny>, _cycle: bool) -> PyResult<()> {
                p.call_method1("text", (self.figures.text.trim_end(),))?;
                Ok(())
            }

            $($extra)*
        }
    };
}

int_getters!(Estimate {
    /// Parameters of the model.
    parameters,
    /// Parameters a token goes through (MoE models: the routed experts only).
    active_parameters,
    /// Weights, in bytes.
    weights_bytes,
    /// The KV cache (inference).
    kv_cache_bytes,
    /// Activations at the peak.
    activation_bytes,
    /// Gradients (training).
    gradients_bytes,
    /// Optimizer states and master weights (training).
    optimizer_bytes,
    /// Everything on one device without parallelism.
    total_bytes,
    /// KV cache bytes per token.
    kv_bytes_per_token,
    /// Devices the model is spread over.
    devices,
    /// Sequences per step.
    batch,
    /// Tokens per sequence.
    seq,
}
    /// The busiest device's figures (the same keys), with parallelism.
    #[getter]
    fn per_device<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        json_to_py(py, &self.figures.json["per_device"])
    }

    fn __repr__(&self) -> String {
        format!(
            "<memplan.Estimate {}: {} parameters, total {}>",
            self.figures.json["model_type"].as_str().unwrap_or("?"),
            self.figures.int("parameters").unwrap_or(0),
            memplan::size(self.figures.int("total_bytes").unwrap_or(0))
        )
    }
);

/// The memory of the model `config` describes (a path to a Hugging Face `config.json`, a
/// dict, or a `transformers` config) running a workload given as keywords, `memplan
/// estimate`'s flags: `batch`, `seq`, `dtype`, `weight_dtype`, `group_size`,
/// `quantize_embeddings`, `kv_dtype`, `logits`, `training`, `checkpointing`, `tp`, `pp`,
/// `ep`, `dp`, `zero`, `sequence_parallel`, `master_weights`, `flash`, `runtime`,
/// `attention`, `precision`, `optimizer_kernel`, `plan_step` (an `hf` training step
/// planned by memplan's planner too: `as_dict()["arena_step"]`).
///
/// >>> e = memplan.estimate("llama-3-8b/config.json", batch=8, seq=2048, dtype="bf16")
/// >>> e.parameters, e.kv_cache_bytes, e.total_bytes
/// >>> memplan.estimate(cfg, training="adamw", dtype="bf16", dp=8, zero=3).per_device
#[pyfunction]
#[pyo3(signature = (config, **workload))]
pub fn estimate(
    py: Python<'_>,
    config: &Bound<'_, PyAny>,
    workload: Option<&Bound<'_, PyDict>>,
) -> PyResult<Estimate> {
    let mut settings = WorkloadSettings::default();
    apply(workload, |k, v| settings.set(k, v))?;
    let mut notes = Vec::new();
    let config = load_config(py, config, &mut notes)?;
    let answer = py
        .detach(|| memplan::estimate::estimate(config, &settings, &mut notes))
        .py(py)?;
    Ok(Estimate {
        figures: Figures {
            json: answer.json(),
            text: answer.text(),
            notes,
        },
    })
}

/// The answer of `memplan.fit`: the largest value of `symbol` that fits, its total, the
/// breakdown and the value after it.
#[pyclass(module = "memplan", name = "FitResult", frozen)]
#[derive(Debug)]
pub struct FitResult {
    figures: Figures,
    plan: Option<Py<crate::plan::Plan>>,
}

int_getters!(FitResult {
    /// The largest value that fits (`None` when nothing does: `DoesNotFitError`).
    value,
    /// The budget, in bytes.
    budget_bytes,
    /// Device bytes at the answer.
    total_bytes,
}
    /// The symbol fitted.
    #[getter]
    fn symbol(&self) -> String {
        self.figures.json["symbol"].as_str().unwrap_or("").to_owned()
    }

    /// What the total is made of (`arena_bytes`, `weights_bytes`, ... or the estimate).
    #[getter]
    fn breakdown<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        json_to_py(py, &self.figures.json["breakdown"])
    }

    /// The value after the answer and its bytes (`{"value", "total_bytes", "fits"}`), or
    /// `None` at the top of the range.
    #[getter]
    fn next<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        json_to_py(py, &self.figures.json["next"])
    }

    /// The plan at the answer (fitting a graph without `training`), else `None`.
    #[getter]
    fn plan(&self, py: Python<'_>) -> Option<Py<crate::plan::Plan>> {
        self.plan.as_ref().map(|p| p.clone_ref(py))
    }

    fn __repr__(&self) -> String {
        format!(
            "<memplan.FitResult {} = {}: {} within {}>",
            self.symbol(),
            self.figures.int("value").map_or("none".to_owned(), |v| v.to_string()),
            memplan::size(self.figures.int("total_bytes").unwrap_or(0)),
            memplan::size(self.figures.int("budget_bytes").unwrap_or(0))
        )
    }
);

/// Whether `source` (a path, bytes or a dict) holds a model config rather than a graph.
fn is_config(py: Python<'_>, source: &Bound<'_, PyAny>) -> PyResult<bool> {
    if source.cast::<Graph>().is_ok() {
        return Ok(false);
    }
    if source.is_instance_of::<PyDict>() {
        return Ok(source.get_item("nodes").is_err() && source.get_item("tensors").is_err());
    }
    if source.hasattr("to_dict")? && !source.hasattr("SerializeToString")? {
        return Ok(true);
    }
    let path = match fspath(source)? {
        Some(p) => p,
        None if source.is_instance_of::<PyString>() => source.extract()?,
        None => return Ok(false),
    };
    // A config is JSON; a graph may be a large ONNX file: look at its first byte first.
    let text = py.detach(|| -> std::io::Result<Option<String>> {
        use std::io::Read as _;
        let mut first = [0u8; 64];
        let n = std::fs::File::open(&path)?.read(&mut first)?;
        let opens = first[..n]
            .iter()
            .find(|b| !b.is_ascii_whitespace())
            .is_some_and(|b| *b == b'{');
        Ok(if opens {
            Some(std::fs::read_to_string(&path)?)
        } else {
            None
        })
    });
    Ok(matches!(text, Ok(Some(t)) if memplan::load::model_config(&t).is_some()))
}

/// A size argument (`"24GiB"` or bytes).
fn size_arg(name: &str, v: &Bound<'_, PyAny>) -> PyResult<u64> {
    let py = v.py();
    let value = value(name, v)?;
    if matches!(value, Value::None) {
        return Err(option(
            py,
            format!("`{name}` is required: a size such as \"24GiB\""),
        ));
    }
    let bytes = as_size(name, &value).py(py)?;
    if bytes == 0 {
        return Err(input(
            py,
            format!("`{name}` must be positive: 0 bytes fits nothing (e.g. \"24GiB\")"),
        ));
    }
    Ok(bytes)
}

/// A "does not fit" exception carrying `result`.
fn does_not_fit<T: pyo3::PyClass + Into<PyClassInitializer<T>>>(
    py: Python<'_>,
    message: String,
    result: T,
) -> PyErr {
    let err = raise(py, "DoesNotFitError", message);
    if let Ok(obj) = Py::new(py, result) {
        let _ = err.value(py).setattr("result", obj);
    }
    err
}

/// The largest value of `symbol` that fits `budget`: planning `source` (a graph: a `Graph`,
/// a path, bytes) at each value tried, with the planning options (and `training` for a
/// training step), or from the estimate of `source` as a model config (`symbol` `batch` or
/// `seq`, the workload options). Raises `DoesNotFitError` (its `result` the `FitResult`)
/// when not even `min` fits.
///
/// >>> memplan.fit("config.json", symbol="batch", budget="80GiB", seq=4096).value
/// >>> memplan.fit("model.onnx", symbol="batch", budget="24GiB", dims={"seq": 512}).plan
#[pyfunction]
#[pyo3(signature = (source, *, symbol, budget, min=1, max=None, count_caller_io=false, **options))]
#[allow(
    clippy::too_many_arguments,
    reason = "the keyword arguments of a Python function"
)]
pub fn fit(
    py: Python<'_>,
    source: &Bound<'_, PyAny>,
    symbol: String,
    budget: &Bound<'_, PyAny>,
    min: u64,
    max: Option<u64>,
    count_caller_io: bool,
    options: Option<&Bound<'_, PyDict>>,
) -> PyResult<FitResult> {
    let budget = size_arg("budget", budget)?;
    let mut notes = Vec::new();
    let (figures, value, plan) = if is_config(py, source)? {
        if count_caller_io {
            return Err(option(
                py,
                "count_caller_io goes with a graph, not a model config",
            ));
        }
        let mut settings = WorkloadSettings::default();
        apply(options, |k, v| settings.set(k, v))?;
        let config = load_config(py, source, &mut notes)?;
        let fit = py
            .detach(|| {
                memplan::fit::fit_config(&config, &settings, &symbol, budget, min, max, &mut notes)
            })
            .py(py)?;
        (
            Figures {
                json: serde_json::from_str(&fit.json()).unwrap_or_default(),
                text: fit.text(),
                notes,
            },
            fit.value,
            None,
        )
    } else {
        let mut settings = PlanSettings::default();
        apply(options, |k, v| settings.set(k, v))?;
        let Graph { graph, dims } = crate::graph::graph_arg(py, Some(source))?;
        let mut all = dims;
        all.append(&mut settings.dims);
        settings.dims = memplan::load::unique_dims(&all).py(py)?;
        let training = settings.training.is_some();
        let result = py.detach(|| -> memplan::Result<_> {
            let (graph, options) = memplan::load::prepare_symbolic(graph, &settings, &mut notes)?;
            if training {
                let request = memplan::training::FitRequest {
                    symbol: &symbol,
                    budget,
                    min,
                    max: max.unwrap_or(u64::from(u32::MAX)),
                };
                let fit = memplan::training::fit(&graph, &options, &settings, &request)?;
                Ok((fit.json(), fit.text(10)?, fit.value, None))
            } else {
                let request = memplan_tracker::FitRequest::new(&symbol, budget)
                    .with_min(min)
                    .with_max(max.unwrap_or(memplan_tracker::FitRequest::new("", 0).max))
                    .with_count_caller_io(count_caller_io);
                let fit = memplan::fit::fit_graph(&graph, &options, &settings.dims, &request)?;
                let plan = match (&fit.fit.plan, fit.fit.value) {
                    (Some(plan), Some(_)) => Some(memplan::plan::Planned::new(
                        graph.bound(&fit.fit.bindings)?,
                        plan.clone(),
                        true,
                    )),
                    _ => None,
                };
                Ok((fit.json(), fit.text(10)?, fit.fit.value, plan))
            }
        });
        let (json, text, value, planned) = result.py(py)?;
        let plan = match planned {
            Some(planned) => Some(Py::new(py, crate::plan::Plan::new(planned, Vec::new()))?),
            None => None,
        };
        (
            Figures {
                json: serde_json::from_str(&json).unwrap_or_default(),
                text,
                notes,
            },
            value,
            plan,
        )
    };
    let result = FitResult { figures, plan };
    if value.is_none() {
        let message = result
            .figures
            .text
            .lines()
            .next()
            .unwrap_or("nothing fits")
            .to_owned();
        return Err(does_not_fit(py, message, result));
    }
    Ok(result)
}

/// A serving engine's KV cache on each device: tokens, blocks, and (with `seq`) how many
/// sequences run at once, as vLLM sizes it.
#[pyclass(module = "memplan", name = "ServingCapacity", frozen)]
#[derive(Debug)]
pub struct ServingCapacity {
    figures: Figures,
}

int_getters!(ServingCapacity {
    /// KV cache tokens per device.
    kv_tokens,
    /// KV cache blocks per device.
    kv_blocks,
    /// Sequences of `seq` tokens at once (with `seq`).
    max_concurrent_seqs,
    /// KV cache bytes per token.
    kv_bytes_per_token,
    /// Weights per device.
    weights_bytes,
    /// One step's activation peak.
    activation_bytes,
    /// Memory outside the engine's tensors.
    reserve_bytes,
    /// The KV cache per device.
    kv_cache_bytes,
    /// Everything per device.
    total_bytes,
    /// The budget times `gpu_util`.
    usable_bytes,
    /// Devices (tensor × pipeline parallel).
    devices,
}
    /// Whether anything fits.
    #[getter]
    fn fits(&self) -> bool {
        self.figures.json["fits"].as_bool().unwrap_or(false)
    }

    fn __repr__(&self) -> String {
        format!(
            "<memplan.ServingCapacity: {} KV tokens ({} blocks){}>",
            self.figures.int("kv_tokens").unwrap_or(0),
            self.figures.int("kv_blocks").unwrap_or(0),
            self.figures
                .int("max_concurrent_seqs")
                .map_or_else(String::new, |n| format!(", {n} sequences at once"))
        )
    }
);

/// The KV cache a serving engine (vLLM's sizing) gets on each device of `budget` bytes for
/// the model `config`: the engine's settings (`gpu_util`, `max_batched_tokens`, `max_seqs`,
/// `block_size`, `reserve`) and the workload's (`seq`, `dtype`, `kv_dtype`, `tp`, ...) as
/// keywords. Raises `DoesNotFitError` when the weights, activations and reserve leave no
/// room.
///
/// >>> c = memplan.serving("llama-3-8b/config.json", budget="80GiB", seq=4096)
/// >>> c.kv_tokens, c.max_concurrent_seqs
/// (454480, 110)
#[pyfunction]
#[pyo3(signature = (config, *, budget, **options))]
pub fn serving(
    py: Python<'_>,
    config: &Bound<'_, PyAny>,
    budget: &Bound<'_, PyAny>,
    options: Option<&Bound<'_, PyDict>>,
) -> PyResult<ServingCapacity> {
    let budget = size_arg("budget", budget)?;
    let mut engine = ServingSettings::default();
    let mut workload = WorkloadSettings::default();
    let engine_keys: Vec<&str> = memplan::fit::SERVING_KEYWORDS
        .iter()
        .map(|(k, _)| *k)
        .collect();
    apply(options, |k, v| {
        if engine_keys.contains(&k) {
            engine.set(k, v)
        } else {
            workload.set(k, v)
        }
    })?;
    let mut notes = Vec::new();
    let config = load_config(py, config, &mut notes)?;
    let answer = py
        .detach(|| memplan::fit::serving(config, &workload, &engine, budget, &mut notes))
        .py(py)?;
    let result = ServingCapacity {
        figures: Figures {
            json: answer.json(),
            text: answer.text(),
            notes,
        },
    };
    if !answer.capacity.fits {
        let message = result
            .figures
            .text
            .lines()
            .next()
            .unwrap_or("nothing fits")
            .to_owned();
        return Err(does_not_fit(py, message, result));
    }
    Ok(result)
}
