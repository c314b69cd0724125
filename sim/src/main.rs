//! sim (placeholder until its issue lands).
fn main() {}
