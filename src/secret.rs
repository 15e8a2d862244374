//! A value that must never reach a log line, an error or a `Debug` dump
//! (the Linode token). It shows as `***`; only `expose` gives the value, at
//! the one place that sends it.

use std::fmt;

#[derive(Clone, PartialEq, Eq, Default)]
pub struct Secret(String);

impl Secret {
    pub fn new(value: impl Into<String>) -> Secret {
        Secret(value.into())
    }

    /// The value in the file at `path`, whitespace around it dropped; why
    /// not when the file cannot be read or holds none.
    pub fn from_file(path: &std::path::Path) -> Result<Secret, String> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
        let value = text.trim();
        if value.is_empty() {
            return Err(format!("{} holds no token", path.display()));
        }
        Ok(Secret::new(value))
    }

    /// The value itself, for the header or file it belongs in.
    pub fn expose(&self) -> &str {
        &self.0
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("***")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_hides_the_value() {
        let s = Secret::new("sekrit-token");
        assert_eq!(format!("{s:?}"), "***");
        assert_eq!(format!("{:?}", Some(&s)), "Some(***)");
        assert_eq!(s.expose(), "sekrit-token");
        assert!(!s.is_empty() && Secret::default().is_empty());
    }
}
