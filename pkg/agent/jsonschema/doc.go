// Package jsonschema validates tool arguments against the subset of JSON
// Schema that plumb's tools use: type (a name or a list of names), object
// properties/required/additionalProperties, array items/minItems/maxItems,
// enum, string minLength/maxLength, and number minimum/maximum. Other
// keywords (description, default, title, format, ...) are accepted and
// ignored, so client-declared schemas with richer keywords still compile.
//
// Validation also coerces the lenient argument forms of docs/file-tools.md §6:
// an integer accepts a whole-valued float and a decimal string, a boolean
// accepts "true" and "false". The coerced document is returned so that
// tools see canonical JSON types.
//
// The package is pure: no I/O, no logging, no dependency on the executor.
package jsonschema
