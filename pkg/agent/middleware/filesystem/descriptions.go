package filesystem

const lsDescription = `List the direct children of a directory (not recursive), one absolute path per line; directories end with /. Dotfiles are included.`

// readDescription is read_file's description; vision says whether the
// model is shown images.
func readDescription(vision bool) string {
	media := "Images and PDFs are reported but not shown."
	if vision {
		media = "Images (PNG, JPEG, GIF, WebP) are shown to you; PDFs are reported but not shown."
	}
	return `Read a text file. The result shows each line with a line-number gutter ("  12  text"); the gutter is not part of the file, so never copy it into edit_file. Reads up to 2000 lines by default; for longer files the result says which offset to continue from (offset is the 0-based line index, limit the number of lines). Very long lines are split into continuation rows (12.1, 12.2, ...). ` + media + ` Prefer reading only the part you need.`
}

const writeDescription = `Write a file, creating it (and missing parent directories) or replacing its whole content. To change part of an existing file, prefer edit_file.`

const editDescription = `Replace exact text in a file. old_string must match the file exactly (whitespace and indentation included, without the read_file line-number gutter) and must be unique unless replace_all is true; add surrounding lines to make it unique. Use write_file to create a file or replace all of it.`

const deleteDescription = `Delete a file, or a directory with everything under it (recursive). Deletion is permanent and cannot be undone.`

const globDescription = `Find files by name pattern; returns matching regular files, one absolute path per line, sorted.
- A pattern without "/" matches file names at any depth (basename mode): "*.py" finds every .py file.
- A pattern with "/" matches the path relative to the search directory, anchored there (path mode): "src/**/*.go".
- "*" and "?" never cross "/"; a "**" segment matches any number of directories; {a,b} alternatives and [abc] classes work.
- Names starting with "." match only patterns that start with "." (so "**" skips dot-directories; name them explicitly: ".github/**/*.yml").`

const grepDescription = `Search file contents line by line under a directory (recursively) or in one file. Binary files are skipped. output_mode: files_with_matches (paths only, default), content (path header, then "  line: text" rows), or count (matches per file). max_count caps the total number of matches.`

const grepRegexDescription = ` The pattern is literal text by default (case-sensitive); set regex=true to use an RE2 regular expression (no lookaround or backreferences; use (?i) for case-insensitive).`

const grepLiteralDescription = ` The pattern is always literal text (case-sensitive); regular expressions are not available.`

const executeDescription = `Run a shell command with /bin/sh -c in the workspace and return its combined stdout and stderr and the exit code. A non-zero exit code is reported, not treated as a tool failure. timeout is in seconds: omitted or null = %d, 0 = the maximum (%d); longer jobs should run in the background with their output redirected to a file. Very long output keeps its head and tail. Prefer the file tools for reading, searching and editing files.`
