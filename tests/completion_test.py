"""The bash completion `loom completion bash` writes, checked against the commands' own parsers
(run by tests/test_completion.sh): for every command, each flag the script offers is one the
parser takes, each flag --help lists is offered unless the parser refuses it, the script takes a
value after exactly the flags whose parser wants one, and values complete to the words, files or
folders the option names.  No command runs: every parser call ends in --help."""
import os, re, subprocess, sys, tempfile

build = os.environ.get("LOOM_BUILD", "build")
loom = os.path.abspath(os.path.join(build, "loom"))
passed = failed = 0


def check(name, ok, detail=""):
    global passed, failed
    passed, failed = passed + bool(ok), failed + (not ok)
    if not ok:
        print(f"  FAIL {name}: {str(detail)[-1500:]}", file=sys.stderr)


def run(*args):
    return subprocess.run([loom, *args], capture_output=True, text=True, timeout=30, stdin=subprocess.DEVNULL)


r = run("completion", "bash")
check("loom completion bash", r.returncode == 0 and "complete -o filenames -F _loom loom" in r.stdout, r.stderr)
work = tempfile.mkdtemp(prefix="loom-completion-")
script = os.path.join(work, "loom.bash")
open(script, "w").write(r.stdout)
syntax = subprocess.run(["bash", "-n", script], capture_output=True, text=True)
check("the script is valid bash", syntax.returncode == 0, syntax.stderr)
r = run("completion", "zsh")
check("another shell is a usage error", r.returncode == 2 and "bash" in r.stderr, r.stderr)
os.mkdir(os.path.join(work, "somedir"))
open(os.path.join(work, "somefile.txt"), "w").close()


def complete(*words):
    """What the script offers for the last word (COMP_WORDS = loom + words), run in `work`."""
    code = 'source "$1"; shift; COMP_WORDS=(loom "$@"); COMP_CWORD=$#; _loom; printf "%s\\n" "${COMPREPLY[@]}"'
    r = subprocess.run(["bash", "-c", code, "_", script, *words], capture_output=True, text=True, cwd=work, timeout=30)
    return [w for w in r.stdout.split("\n") if w]


helped = run("--help").stdout
commands = re.findall(r"^  (\w+) ", helped, re.M)
check("loom --help lists the commands", {"serve", "run", "chat", "completion"} <= set(commands), helped)
check("the first word completes to the commands", set(complete("")) >= set(commands) | {"--help", "--version"},
      complete(""))
check("completion completes to its shell", complete("completion", "") == ["bash"], complete("completion", ""))


def help_flags(cmd):
    """Every spelling in the option labels of `loom CMD --help` ("  --name METAVAR, -x, --alias")."""
    flags = []
    for line in run(cmd, "--help").stdout.split("\n"):
        m = re.match(r"^  (-\S.*?)(?:\s{2,}|$)", line)
        if m:
            flags += [part.split(" ")[0] for part in m.group(1).split(", ")]
    return flags


for cmd in (c for c in commands if c != "completion"):
    offered = complete(cmd, "-")
    check(f"{cmd}: flags are offered", len(offered) > 1 and "--help" in offered, offered)
    listed = help_flags(cmd)
    for flag in sorted(set(offered) | set(listed)):
        if flag in ("--help", "-h"):
            continue
        # "1" is the value of a flag that takes one, else the model folder; --help then ends the parse
        r = run(cmd, flag, "1", "--help")
        refused = "is not a loom option" in r.stderr
        known = "unknown option" not in r.stderr and (r.returncode == 0 or (r.returncode == 2 and not refused))
        if flag in offered:
            check(f"{cmd} {flag}: offered, and the parser takes it", known, r.stderr)
        if flag in listed:
            check(f"{cmd} {flag}: in --help, offered unless refused", (flag in offered) == (not refused),
                  (refused, r.stderr))
        if flag in offered and flag.startswith("--"):
            wants_value = "takes no value" not in run(cmd, f"{flag}=1", "--help").stderr
            script_takes_value = complete(cmd, flag, "-") == []  # a value arm offers no flags
            check(f"{cmd} {flag}: a value after it in the script iff in the parser",
                  wants_value == script_takes_value, (wants_value, script_takes_value))

# values: the words an option names, files for FILE, folders for DIR (and the model folder)
for words, want in ((["serve", "--device", ""], {"cpu", "ref", "cuda"}),
                    (["serve", "--log-level", ""], {"debug", "info", "warning", "error"}),
                    (["run", "--quantize", ""], {"int8", "fp8", "none"}),
                    (["chat", "--generation-config", ""], {"auto", "vllm", "somedir"}),
                    (["serve", "--device", "="], {"cpu", "ref", "cuda"}),  # bash splits --device= at the =
                    (["serve", "--device", "=", "c"], {"cpu", "cuda"}),
                    (["run", "--ids-file", "some"], {"somedir", "somefile.txt"}),
                    (["serve", "--model", "some"], {"somedir"}),
                    (["run", "some"], {"somedir"}),
                    (["serve", "--port", ""], set())):
    got = set(complete(*words))
    check(f"complete {' '.join(words)!r}", got == want, (got, want))
check("serve --max-n completes --max-num-seqs and --max-num-batched-tokens",
      set(complete("serve", "--max-n")) == {"--max-num-seqs", "--max-num-batched-tokens"}, complete("serve", "--max-n"))
# what the old script (which scraped --help) offered though no parser takes it
for cmd, word in (("serve", "--local-dir"), ("serve", "--template"), ("serve", "--max-tokens"), ("run", "--gpu-layers")):
    check(f"{cmd}: {word} is not offered", word not in complete(cmd, "-"), word)

print(f"test_completion.sh: {passed} passed, {failed} failed")
sys.exit(1 if failed else 0)
