#!/usr/bin/python3
"""Every repository path that a doc or a comment names exists.

Usage: test_paths.py SOURCE_DIR

Scans the *.md files, and the comments (only the comments) of the C++, CUDA,
shell, Python and CMake files, for paths that start at one of the
repository's top-level folders, in two forms: a file with an extension
("parallel/comm/tcp/ring.h") and a folder with a trailing slash
("tensor/cuda/"). Each must exist, relative to the repository root or to the
folder of the file that names it. Exits 1 listing "file:line: path" for each
that does not.

Allowed without a check: patterns (a path with * ? { [ < or $ in it, such as
"configs/*.toml"), outputs (a path with a build*, runs or out folder in it),
and paths in code outside comments (a string literal names what a program
opens, not what the reader should look at). Not checked: paths without an
extension or a trailing slash (a word pair with a slash is as often a phrase as a path),
and paths relative to another folder ("tcp/ring.h" in docs/comm.md).

Before scanning, it checks its own comment extraction on a few snippets.
"""
import io
import os
import re
import sys
import tokenize

TOP = ("runtime", "kernels", "tensor", "autograd", "parallel", "launcher", "train", "bench",
       "examples", "tests", "docs", "scripts", "configs", "cmake")
SKIP_DIRS = {".git", ".deps", "__pycache__"}  # and build*/ and other hidden folders
TOKEN = re.compile(r"[\w.\-+/*?{}\[\]<>$@~]+")
FILE_FORM = re.compile(r"[\w.\-+]*[\w\-+]\.[A-Za-z0-9]+")
PATTERN_CHARS = set("*?{}[]<>$@~")
OUTPUT_DIRS = ("runs", "out")


# --- Where the prose is: which lines of a file are doc or comment ----------------------------


def c_comments(text):
    """(line, comment text) for each // and /* */ comment, skipping string and
    character literals (raw strings included)."""
    out, i, line, n = [], 0, 1, len(text)
    while i < n:
        c = text[i]
        if c == "\n":
            line += 1
            i += 1
        elif text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            out.append((line, text[i + 2:j]))
            i = j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j
            for k, part in enumerate(text[i + 2:j].split("\n")):
                out.append((line + k, part))
            line += text.count("\n", i, j)
            i = j + 2
        elif c == "R" and text.startswith('R"', i) and (i == 0 or not text[i - 1].isalnum()):
            open_end = text.find("(", i + 2)
            delim = text[i + 2:open_end]
            j = text.find(")" + delim + '"', open_end)
            j = n if j < 0 else j + len(delim) + 2
            line += text.count("\n", i, j)
            i = j
        elif c in "\"'":
            if c == "'" and i > 0 and text[i - 1].isalnum():  # a digit separator: 1'000
                i += 1
                continue
            j = i + 1
            while j < n and text[j] != c and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            i = j + 1
        else:
            i += 1
    return out


def hash_comments(text):
    """(line, comment text) for each # comment of a shell or CMake file: a #
    that starts a word outside quotes (so not $# or ${#x})."""
    out = []
    for line_no, line in enumerate(text.split("\n"), 1):
        quote = None
        for i, c in enumerate(line):
            if quote:
                if c == "\\" and quote == '"':
                    continue
                if c == quote:
                    quote = None
            elif c in "\"'":
                quote = c
            elif c == "#" and (i == 0 or line[i - 1] in " \t;("):
                out.append((line_no, line[i + 1:]))
                break
    return out


def python_comments(text):
    """(line, text) for each # comment and each docstring of a Python file."""
    out = []
    try:
        tokens = list(tokenize.generate_tokens(io.StringIO(text).readline))
    except (tokenize.TokenError, IndentationError, SyntaxError):
        return hash_comments(text)
    skip = (tokenize.COMMENT, tokenize.NL, tokenize.INDENT, tokenize.DEDENT, tokenize.ENCODING)
    code = [t for t in tokens if t.type not in skip]
    for tok in tokens:
        if tok.type == tokenize.COMMENT:
            out.append((tok.start[0], tok.string[1:]))
    for k, tok in enumerate(code):  # a docstring: a string that is a whole statement
        alone = (k == 0 or code[k - 1].type == tokenize.NEWLINE) and \
            (k + 1 == len(code) or code[k + 1].type in (tokenize.NEWLINE, tokenize.ENDMARKER))
        if tok.type == tokenize.STRING and alone:
            for i, part in enumerate(tok.string.split("\n")):
                out.append((tok.start[0] + i, part))
    out.sort()
    return out


def prose(path, text):
    """The doc or comment lines of a file, or None when it is not scanned."""
    name = os.path.basename(path)
    if name.endswith(".md"):
        return list(enumerate(text.split("\n"), 1))
    if name.endswith((".h", ".cpp", ".cu", ".cuh")):
        return c_comments(text)
    if name.endswith(".py"):
        return python_comments(text)
    if name.endswith((".sh", ".cmake")) or name == "CMakeLists.txt":
        return hash_comments(text)
    if "." not in name and text.startswith("#!"):  # scripts without an extension
        first = text.split("\n", 1)[0]
        if "python" in first:
            return python_comments(text)
        if "sh" in first:
            return hash_comments(text)
    return None


# --- Which words are paths, and whether they exist ----------------------------------------------


def named_paths(line):
    """The repository paths of the checked forms that a line of prose names."""
    for m in TOKEN.finditer(line):
        word = m.group(0)
        while word.startswith("./"):
            word = word[2:]
        word = word.rstrip(".,:;")
        parts = word.split("/")
        if len(parts) < 2 or parts[0] not in TOP:
            continue
        if PATTERN_CHARS & set(word):
            continue  # a pattern or a placeholder
        if any(p.startswith("build") or p in OUTPUT_DIRS for p in parts[:-1]):
            continue  # an output
        if parts[-1] == "" or FILE_FORM.fullmatch(parts[-1]):
            yield word


def exists(root, source, path):
    folder = path.endswith("/")
    for base in (root, os.path.join(root, os.path.dirname(source))):
        full = os.path.join(base, path)
        if os.path.isdir(full) if folder else os.path.isfile(full):
            return True
    return False


def scanned_files(root):
    for top, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d not in SKIP_DIRS and not d.startswith("build")
                         and (not d.startswith(".") or d == ".ci"))
        for f in sorted(files):
            yield os.path.relpath(os.path.join(top, f), root)


def missing_paths(root):
    missing = []
    for rel in scanned_files(root):
        try:
            with open(os.path.join(root, rel), encoding="utf-8") as f:
                text = f.read()
        except (UnicodeDecodeError, OSError):
            continue
        lines = prose(rel, text)
        for line_no, line in lines or []:
            for path in named_paths(line):
                if not exists(root, rel, path):
                    missing.append(f"{rel}:{line_no}: {path}")
    return missing


# --- The extraction checked on snippets ---------------------------------------------------------


def self_test():
    cpp = ('const char* p = "docs/fsdp.md";  // docs/train.md\n'
           "/* tests/skip.h\n   tests/docs/ */ int x = 1'000; // tensor/tensor.cpp\n"
           'auto r = R"(docs/cuda.md // docs/comm.md)"; // docs/ddp.md\n')
    got = [p for _, t in c_comments(cpp) for p in named_paths(t)]
    assert got == ["docs/train.md", "tests/skip.h", "tests/docs/", "tensor/tensor.cpp", "docs/ddp.md"], got
    sh = 'echo "docs/fsdp.md # docs/train.md" $# # docs/ddp.md\n# tests/docs/\n'
    got = [p for _, t in hash_comments(sh) for p in named_paths(t)]
    assert got == ["docs/ddp.md", "tests/docs/"], got
    py = '"""docs/fsdp.md"""\nx = "docs/train.md"  # docs/ddp.md\ndef f():\n    """docs/comm.md"""\n'
    got = [p for _, t in python_comments(py) for p in named_paths(t)]
    assert got == ["docs/fsdp.md", "docs/ddp.md", "docs/comm.md"], got
    md = "See docs/ddp.md, `configs/*.toml`, build/x.json, runs/y/z.log, autograd/nn, ../tests/b.h."
    assert list(named_paths(md)) == ["docs/ddp.md"], list(named_paths(md))


def main():
    if len(sys.argv) != 2:
        sys.exit(f"usage: {sys.argv[0]} SOURCE_DIR")
    self_test()
    missing = missing_paths(sys.argv[1])
    for m in missing:
        print(m)
    if missing:
        print(f"{len(missing)} path(s) named in docs or comments do not exist")
        return 1
    print("every path named in docs and comments exists")
    return 0


if __name__ == "__main__":
    sys.exit(main())
