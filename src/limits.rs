//! CSI's size limits ("Size Limits" in the spec): a string field holds at
//! most 128 bytes and a `map<string, string>` at most 4 KiB. A request past
//! them is refused with InvalidArgument naming the field, before any work,
//! so an oversized input can never reach a backend call, a label or a log
//! line whole. Values are only ever echoed abbreviated ([`shown`]). Paths
//! are the node's own business (`node::input`).

use crate::Error;
use std::collections::HashMap;

/// The spec's limit for a string field.
pub const MAX_STRING_BYTES: usize = 128;
/// The spec's limit for a whole `map<string, string>` (keys and values).
pub const MAX_MAP_BYTES: usize = 4096;

/// Longest value echoed whole in a message.
const SHOWN_BYTES: usize = 96;

/// `field` holds at most [`MAX_STRING_BYTES`].
pub fn string(field: &str, value: &str) -> Result<(), Error> {
    if value.len() > MAX_STRING_BYTES {
        return Err(Error::InvalidArgument(format!(
            "{field} {} is longer than {MAX_STRING_BYTES} bytes",
            shown(value)
        )));
    }
    Ok(())
}

/// `field` holds at most [`MAX_MAP_BYTES`], keys and values together.
pub fn map(field: &str, value: &HashMap<String, String>) -> Result<(), Error> {
    let bytes: usize = value.iter().map(|(k, v)| k.len() + v.len()).sum();
    if bytes > MAX_MAP_BYTES {
        return Err(Error::InvalidArgument(format!(
            "{field} holds {} entries, {bytes} bytes: more than {MAX_MAP_BYTES} bytes",
            value.len()
        )));
    }
    Ok(())
}

/// `value` quoted, cut to a readable length with its size when longer.
pub fn shown(value: &str) -> String {
    if value.len() <= SHOWN_BYTES {
        return format!("{value:?}");
    }
    let mut end = SHOWN_BYTES;
    while !value.is_char_boundary(end) {
        end -= 1;
    }
    format!("{:?}… ({} bytes)", &value[..end], value.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strings_and_maps_past_the_limits_are_refused_briefly() {
        assert!(string("name", &"a".repeat(128)).is_ok());
        let err = string("name", &"é".repeat(5000)).unwrap_err();
        assert!(matches!(err, Error::InvalidArgument(_)));
        assert!(err.message().len() < 300, "{}", err.message());
        assert!(err.message().contains("10000 bytes"));

        let small: HashMap<String, String> = HashMap::from([("k".into(), "v".into())]);
        assert!(map("parameters", &small).is_ok());
        let big: HashMap<String, String> =
            (0..3000).map(|i| (format!("k{i}"), "v".into())).collect();
        let err = map("parameters", &big).unwrap_err();
        assert!(err.message().contains("3000 entries"), "{}", err.message());
    }
}
