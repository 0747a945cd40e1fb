//! Gateway.
