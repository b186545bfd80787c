//! What the CLI's commands print on stdout. Rust's `println!` panics when stdout is a
//! pipe its reader has closed (`glider check | head -1`: EPIPE, exit 101 and a panic
//! message), so every command prints through [`out!`] and [`outln!`] instead: a closed
//! pipe ends the command quietly with success (the reader took what it wanted, as
//! `head` does), any other write error ends it with a message and failure. `glider
//! serve`'s start lines go through [`sayln!`], which never ends a running server: a closed
//! stdout there loses the line, not the gateway.

use std::fmt::Arguments;
use std::io::{ErrorKind, Write};

/// Write `args` to stdout and flush; a closed pipe exits 0, another error exits 1.
pub fn print(args: Arguments<'_>) {
    match write(args) {
        Ok(()) => {}
        Err(e) if e.kind() == ErrorKind::BrokenPipe => std::process::exit(0),
        Err(e) => {
            eprintln!("glider: cannot write to stdout: {e}");
            std::process::exit(1);
        }
    }
}

/// Write `args` and a newline to stdout, losing them if stdout cannot take them.
pub fn say(args: Arguments<'_>) {
    let _ = write(format_args!("{args}\n"));
}

fn write(args: Arguments<'_>) -> std::io::Result<()> {
    let mut stdout = std::io::stdout().lock();
    stdout.write_fmt(args)?;
    stdout.flush()
}

/// `print!` that ends the command quietly when its reader has gone ([`print`]).
macro_rules! out {
    ($($arg:tt)*) => { $crate::out::print(format_args!($($arg)*)) };
}

/// `println!` that ends the command quietly when its reader has gone ([`print`]).
macro_rules! outln {
    () => { $crate::out::print(format_args!("\n")) };
    ($($arg:tt)*) => { $crate::out::print(format_args!("{}\n", format_args!($($arg)*))) };
}

/// `println!` that loses the line when stdout cannot take it ([`say`]).
macro_rules! sayln {
    ($($arg:tt)*) => { $crate::out::say(format_args!($($arg)*)) };
}

pub(crate) use {out, outln, sayln};
