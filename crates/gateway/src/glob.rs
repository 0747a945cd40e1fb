//! `*` globs as used by `models`, `matchModels` (StringLike) and allow-lists: the config crate's
//! (its `check` warnings read globs too).

pub use sidetrack_config::glob::{glob_match, is_glob};
