//! One error type for what has no richer one: a refusal or a broken invariant, in words for
//! the person who reads it. Typed (it is an `Error`, so `?` carries it into any front end's
//! error, and nothing mistakes it for data), and it reads as the text it holds.

use std::fmt;

/// What is wrong, in words: a value refused (a size, a device, a list of steps), a state that
/// breaks an invariant, a feed that is not one.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Problem(pub String);

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Problem {}

impl From<String> for Problem {
    fn from(s: String) -> Problem {
        Problem(s)
    }
}

impl From<&str> for Problem {
    fn from(s: &str) -> Problem {
        Problem(s.to_string())
    }
}

/// The words, as text (`problem.contains("...")`).
impl std::ops::Deref for Problem {
    type Target = str;
    fn deref(&self) -> &str {
        &self.0
    }
}

/// `problem!("...", args)`: a [`Problem`] in the words `format!` makes of its arguments.
#[macro_export]
macro_rules! problem {
    ($($t:tt)*) => {
        $crate::Problem(format!($($t)*))
    };
}
