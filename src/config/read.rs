//! Reading one documented setting: the [`Setting`] rows the tables are made
//! of, the [`Lookup`] that finds a variable's value (flag, environment or
//! documented default) and checks durations and URLs, and the
//! [`ConfigError`] that names the variable when a value is wrong. It must
//! not know which settings exist; the tables in `table.rs` and `dev.rs` say.

use super::parse::{parse_duration, parse_url};
use std::fmt;
use std::time::Duration;

/// One documented setting: its variable, default, and meaning. The tables
/// of them are the single source of `--help` and of which flags exist.
pub(super) struct Setting {
    pub(super) var: &'static str,
    pub(super) default: &'static str,
    pub(super) help: &'static str,
}

/// A startup error: one line naming the variable, and the exit code.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    pub message: String,
    pub exit_code: i32,
}

impl ConfigError {
    pub(super) fn new(message: impl Into<String>) -> ConfigError {
        ConfigError {
            message: message.into(),
            exit_code: 1,
        }
    }
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

/// The values the command line and environment give, over the documented
/// tables' defaults.
pub(super) struct Lookup<'a> {
    /// A variable's value, trimmed; `None` when unset or blank.
    pub(super) get: &'a dyn Fn(&str) -> Option<String>,
    pub(super) documented: &'a [&'a [Setting]],
}

impl Lookup<'_> {
    pub(super) fn get(&self, var: &str) -> Option<String> {
        (self.get)(var)
    }

    /// The documented default of `var`.
    pub(super) fn default_of(&self, var: &str) -> String {
        self.documented
            .iter()
            .flat_map(|table| table.iter())
            .find(|s| s.var == var)
            .map(|s| s.default.to_string())
            .unwrap_or_default()
    }

    pub(super) fn or_default(&self, var: &str) -> String {
        self.get(var).unwrap_or_else(|| self.default_of(var))
    }

    pub(super) fn duration(&self, var: &str) -> Result<Duration, ConfigError> {
        parse_duration(&self.or_default(var)).map_err(|e| ConfigError::new(format!("{var}: {e}")))
    }

    /// A duration that bounds a call: a zero bound would fail every call it
    /// bounds, long after startup.
    pub(super) fn timeout(&self, var: &str) -> Result<Duration, ConfigError> {
        Some(self.duration(var)?)
            .filter(|d| !d.is_zero())
            .ok_or_else(|| ConfigError::new(format!("{var}: must be greater than zero")))
    }

    /// The value of `choices` that `var` names; `what` says what such a
    /// value is in the error.
    pub(super) fn choice<T: Copy>(
        &self,
        var: &str,
        what: &str,
        choices: &[(&str, T)],
    ) -> Result<T, ConfigError> {
        let raw = self.or_default(var);
        match choices.iter().find(|(name, _)| *name == raw) {
            Some((_, value)) => Ok(*value),
            None => {
                let names: Vec<&str> = choices.iter().map(|(name, _)| *name).collect();
                Err(ConfigError::new(format!(
                    "{var}: invalid {what} \"{raw}\" (want {})",
                    names.join(" or ")
                )))
            }
        }
    }

    pub(super) fn url(&self, var: &str) -> Result<String, ConfigError> {
        parse_url(&self.or_default(var)).map_err(|e| ConfigError::new(format!("{var}: {e}")))
    }
}
