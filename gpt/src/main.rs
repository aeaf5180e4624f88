fn main() {
    eprintln!("nvsh-gpt: not built yet");
    std::process::exit(2);
}
