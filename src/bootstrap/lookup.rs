//! How the bootstrap decisions read the environment, so that tests can hand them a fixed table.

/// A variable's value, None when unset: the process environment in use ([`process_env`]), a
/// fixed table in tests.
pub type Lookup<'a> = &'a dyn Fn(&str) -> Option<String>;

/// The process environment as a [`Lookup`] (a value that is not Unicode counts as unset).
pub fn process_env(name: &str) -> Option<String> {
    std::env::var(name).ok()
}
