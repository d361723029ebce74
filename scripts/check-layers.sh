#!/bin/sh
# check-layers.sh [TOP] - check every #include under src/ against the
# layering rule of src/README: a folder includes the headers of folders in
# lower layers only (a public header mk/NAME.h counting as the folder that
# implements it), and its own.  Also refused: an include that climbs out
# of its folder ("../"), one of a folder or public header the tables do
# not name, a folder of src/ with C code that no layer lists.
# Prints each offending include as FILE:LINE: why; exits 1 if any, else 0.
set -eu
top=${1:-$(cd "$(dirname "$0")/.." && pwd)}
cd "$top"
[ -f src/README ] || { echo "check-layers: src/README not found" >&2; exit 2; }

find src -mindepth 2 -maxdepth 2 -type f \( -name '*.c' -o -name '*.h' -o -name '*.cu' -o -name '*.cc' \) |
	sort | xargs grep -Hn '^[ 	]*#[ 	]*include[ 	]*"' /dev/null |
	awk -v readme=src/README '
	BEGIN {
		while ((getline line < readme) > 0) {
			if (line ~ /^ *layer [0-9]+:/) {
				n = split(line, w, /[ :]+/)
				for (i = 1; i <= n; i++) if (w[i] == "layer") { lv = w[i + 1]; s = i + 2; break }
				for (i = s; i <= n; i++) if (w[i] != "") layer[w[i]] = lv + 0
			} else if (line ~ /^ *public:/) {
				sub(/^ *public: */, "", line)
				n = split(line, w, / +/)
				for (i = 1; i <= n; i++) { split(w[i], kv, "="); pub[kv[1]] = kv[2] }
			}
		}
		bad = 0
	}
	function complain(msg) { print where ": " msg; bad = 1 }
	{
		# FILE:LINE:#include "X"
		split($0, p, ":")
		file = p[1]; where = p[1] ":" p[2]
		split(file, f, "/"); from = f[2]
		if (!(from in layer)) { if (!(from in unlisted)) { unlisted[from] = 1; complain("folder src/" from " is in no layer of src/README") } next }
		inc = $0; sub(/^[^"]*"/, "", inc); sub(/".*/, "", inc)
		if (inc ~ /\.\.\//) { complain("\"" inc "\" climbs out of its folder; include by folder (\"core/pool.h\")"); next }
		if (inc !~ /\//) next                       # the folder'"'"'s own header
		split(inc, q, "/")
		if (q[1] == "mk") {
			h = q[2]; sub(/\.h$/, "", h)
			if (!(h in pub)) { complain("mk/" h ".h: no folder for it in src/README'"'"'s public: lines"); next }
			to = pub[h]
		} else
			to = q[1]
		if (to == from) next
		if (!(to in layer)) { complain("\"" inc "\": folder " to " is in no layer of src/README"); next }
		if (layer[to] >= layer[from])
			complain("src/" from " (layer " layer[from] ") includes \"" inc "\" of " to " (layer " layer[to] "): only lower layers")
	}
	END { exit bad }'
