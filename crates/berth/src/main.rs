mod fetch;
mod vendor;

fn main() {}
