//! Print the native metrics of a COLMAP model folder (binary or text):
//! `cargo run -p tessera-sfm --example model_info -- PATH`.

fn main() {
    let Some(dir) = std::env::args().nth(1) else {
        eprintln!("usage: model_info MODEL_DIR");
        std::process::exit(2);
    };
    let dir = std::path::Path::new(&dir);
    let rec = if dir.join("cameras.bin").exists() {
        tessera_sfm::model_bin::read(dir)
    } else {
        tessera_sfm::model_text::read(dir)
    };
    match rec {
        Ok(rec) => println!(
            "{}",
            serde_json::to_string_pretty(&tessera_sfm::metrics::compute(&rec))
                .expect("serializable")
        ),
        Err(e) => {
            eprintln!("error: {e}");
            std::process::exit(1);
        }
    }
}
