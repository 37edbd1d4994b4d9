//! A `nessie::Config` from Python values: `None` (the defaults), a dict
//! with the keys of the Rust `Config` (durations in milliseconds), or the
//! path of a TOML file; keyword settings override single keys, and
//! `fabric` may be just a name (`"shm"`, `"tcp"`, `"verbs"`, `"local"`).

use crate::errors;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyString};
use serde_json::{Map, Value};

/// Serializes a Python object to JSON text with the standard library.
fn to_json(obj: &Bound<'_, PyAny>) -> PyResult<Value> {
    let json = obj.py().import("json")?;
    let text: String = json.call_method1("dumps", (obj,))?.extract()?;
    serde_json::from_str(&text).map_err(|e| errors::config(e.to_string()))
}

/// A value of the Rust config as a Python object (through JSON).
pub(crate) fn to_python<'py, T: serde::Serialize>(
    py: Python<'py>,
    value: &T,
) -> PyResult<Bound<'py, PyAny>> {
    let text = serde_json::to_string(value).map_err(|e| errors::config(e.to_string()))?;
    py.import("json")?.call_method1("loads", (text,))
}

/// A fabric given by name, with the fields a launcher fills in left empty.
fn fabric_named(name: &str) -> PyResult<Value> {
    let value = match name {
        "local" | "shm" => serde_json::json!({ "kind": name }),
        "tcp" | "verbs" => serde_json::json!({ "kind": name, "secret": "" }),
        other => {
            return Err(errors::config(format!(
                "unknown fabric {other:?}: use local, shm, tcp or verbs"
            )))
        }
    };
    Ok(value)
}

/// The configuration `config` and `settings` describe (not yet validated:
/// starting a node validates it).
pub(crate) fn build(
    config: Option<&Bound<'_, PyAny>>,
    settings: Option<&Bound<'_, PyDict>>,
) -> PyResult<nessie::Config> {
    let base = match config {
        None => nessie::Config::default(),
        Some(c) if c.is_none() => nessie::Config::default(),
        Some(c) if c.is_instance_of::<PyDict>() => from_value(to_json(c)?)?,
        Some(c) => {
            // A path: str or os.PathLike.
            let path: std::path::PathBuf = c.extract().map_err(|_| {
                errors::config("config must be None, a dict or the path of a TOML file")
            })?;
            nessie::Config::from_file(&path).map_err(errors::to_py)?
        }
    };
    let Some(settings) = settings.filter(|s| !s.is_empty()) else {
        return Ok(base);
    };
    let mut merged = match serde_json::to_value(&base) {
        Ok(Value::Object(map)) => map,
        _ => Map::new(),
    };
    for (key, value) in settings.iter() {
        let key: String = key.extract()?;
        let value = if key == "fabric" && value.is_instance_of::<PyString>() {
            fabric_named(&value.extract::<String>()?)?
        } else {
            to_json(&value)?
        };
        merged.insert(key, value);
    }
    from_value(Value::Object(merged))
}

fn from_value(value: Value) -> PyResult<nessie::Config> {
    serde_json::from_value(value).map_err(|e| errors::config(format!("invalid configuration: {e}")))
}

/// The default configuration as a dict (the keys `Cluster.local`,
/// `Node.start` and `Node.from_launcher` accept; durations in ms).
#[pyfunction]
pub(crate) fn default_config(py: Python<'_>) -> PyResult<Bound<'_, PyAny>> {
    to_python(py, &nessie::Config::default())
}
