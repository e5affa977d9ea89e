fn main() {
    match agentfleet::crd::render_all() {
        Ok(s) => print!("{s}"),
        Err(e) => eprintln!("{e}"),
    }
}
