//! `write_file`: creates a file or replaces its whole content.

use crate::paths;
use std::fs;
use std::path::Path;
use toolcage_guest::{Descriptor, Outcome, Tool, Value, json, parse_args};

/// The `write_file` tool.
pub struct WriteFile;

#[derive(serde::Deserialize)]
struct Args {
    path: String,
    content: String,
    #[serde(default)]
    create_dirs: bool,
}

impl Tool for WriteFile {
    fn descriptor() -> Descriptor {
        Descriptor::new(
            "write_file",
            "Writes `content` to a file, creating it or replacing everything it held. Use it \
             for new files or complete rewrites; to change part of an existing file, prefer \
             edit_file. The parent directory must exist unless create_dirs is true. Paths \
             are absolute paths inside the mounted directories, which may be read-only.",
        )
        .title("Write file")
        .input_schema(json!({
            "type": "object",
            "properties": {
                "path": {
                    "type": "string",
                    "description": "Absolute path of the file, e.g. /workspace/notes.md."
                },
                "content": {
                    "type": "string",
                    "description": "The file's complete new content."
                },
                "create_dirs": {
                    "type": "boolean",
                    "description": "Create missing parent directories. Default false."
                }
            },
            "required": ["path", "content"],
            "additionalProperties": false
        }))
        .output_schema(json!({
            "type": "object",
            "properties": {
                "path": { "type": "string", "description": "The normalized absolute path." },
                "bytes": { "type": "integer", "minimum": 0, "description": "Bytes written." },
                "created": {
                    "type": "boolean",
                    "description": "The file did not exist before."
                }
            },
            "required": ["path", "bytes", "created"],
            "additionalProperties": false
        }))
        .destructive()
    }

    fn call(args: Value) -> Result<Outcome, Outcome> {
        let args: Args = parse_args(args)?;
        let path = paths::resolve_file(&args.path).map_err(Outcome::text)?;
        let created = match fs::metadata(&path) {
            Ok(metadata) if metadata.is_dir() => {
                return Err(Outcome::text(format!(
                    "`{path}` is a directory, so it cannot be written as a file. Choose a file \
                     path inside it."
                )));
            }
            Ok(_) => false,
            Err(_) => true,
        };
        if let Some(parent) = Path::new(&path).parent().filter(|parent| !parent.is_dir()) {
            let parent = parent.to_string_lossy();
            if !args.create_dirs {
                return Err(Outcome::text(format!(
                    "The directory `{parent}` does not exist. Call write_file again with \
                     create_dirs=true to create it, or check the path with list_dir."
                )));
            }
            fs::create_dir_all(parent.as_ref()).map_err(|error| {
                Outcome::text(paths::io_error("create the directory", &parent, &error))
            })?;
        }
        fs::write(&path, &args.content)
            .map_err(|error| Outcome::text(paths::io_error("write", &path, &error)))?;
        let bytes = args.content.len();
        let verb = if created { "Created" } else { "Overwrote" };
        let unit = if bytes == 1 { "byte" } else { "bytes" };
        Ok(Outcome::text(format!("{verb} `{path}` ({bytes} {unit})."))
            .with_details(json!({ "path": path, "bytes": bytes, "created": created })))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::TestDir;

    #[test]
    fn creates_then_overwrites() {
        let dir = TestDir::new();
        let path = dir.path("new.txt");
        let outcome = WriteFile::call(json!({ "path": path, "content": "hello\n" })).unwrap();
        assert_eq!(outcome.output, format!("Created `{path}` (6 bytes)."));
        assert_eq!(
            outcome.details,
            Some(json!({ "path": path, "bytes": 6, "created": true }))
        );
        let outcome = WriteFile::call(json!({ "path": path, "content": "" })).unwrap();
        assert_eq!(outcome.details.unwrap()["created"], false);
        assert_eq!(dir.read("new.txt"), "");
    }

    #[test]
    fn creates_parent_directories_only_when_asked() {
        let dir = TestDir::new();
        let path = dir.path("a/b/c.txt");
        let e = WriteFile::call(json!({ "path": path, "content": "x" })).unwrap_err();
        assert!(e.output.contains("create_dirs=true"), "{}", e.output);
        WriteFile::call(json!({ "path": path, "content": "x", "create_dirs": true })).unwrap();
        assert_eq!(dir.read("a/b/c.txt"), "x");
    }

    #[test]
    fn refuses_directories() {
        let dir = TestDir::new();
        let e = WriteFile::call(json!({ "path": dir.path(""), "content": "x" })).unwrap_err();
        assert!(e.output.contains("is a directory"), "{}", e.output);
    }
}
