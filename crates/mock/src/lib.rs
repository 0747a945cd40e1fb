//! Mock provider.
