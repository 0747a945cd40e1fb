//! sidetrack configuration: YAML (or JSON) text → raw serde structs → validated [`model::Config`].

pub mod model;
pub use model::*;
