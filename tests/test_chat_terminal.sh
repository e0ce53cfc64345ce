#!/usr/bin/env bash
# `loom chat` on a terminal (a pty, as a person types): libedit's line
# editing and history (the up arrow recalls the last message, Ctrl-A / Ctrl-E
# / arrows / backspace edit it), multi-line messages (a trailing backslash,
# a """ block), /think, /settings, /help, /clear, an unknown /command, //text,
# Ctrl-D to quit; then the commands through --url (piped input) against a
# loom serve.  What was sent is read back from --show-prompt's rendering on
# stderr (locally) and the server's request lines (--url).
cd "$(dirname "$0")/.." || exit 1
export LOOM_BUILD=${LOOM_BUILD:-build}
exec python3 - <<'PY'
import fcntl, os, re, struct, subprocess, sys, termios, threading, time

build = os.environ["LOOM_BUILD"]
binaries = [os.path.abspath(b) for b in (os.path.join(build, "loom"), os.path.join(build, "asan", "loom"))
            if os.path.exists(b)]
passed = failed = 0


def check(name, ok, detail=""):
    global passed, failed
    passed, failed = passed + bool(ok), failed + (not ok)
    if not ok:
        print(f"  FAIL {name}: {str(detail)[-1200:]}", file=sys.stderr)


class Terminal:
    def __init__(self, binary, *args):
        master, slave = os.openpty()
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 100, 0, 0))
        env = dict(os.environ, TERM="xterm", HOME=os.environ.get("TMPDIR", "/tmp"))
        self.p = subprocess.Popen([binary, "chat", "--temperature", "0", "--max-tokens", "6", "--show-prompt", "--stats", *args],
                                  stdin=slave, stdout=slave, stderr=subprocess.PIPE, env=env, close_fds=True)
        os.close(slave)
        self.master, self.screen, self.err = master, b"", ""
        threading.Thread(target=self._read_screen, daemon=True).start()
        threading.Thread(target=self._read_err, daemon=True).start()

    def _read_screen(self):
        while True:
            try:
                chunk = os.read(self.master, 4096)
            except OSError:
                return
            if not chunk:
                return
            self.screen += chunk

    def _read_err(self):
        for line in self.p.stderr:
            self.err += line.decode(errors="replace")

    def type(self, keys):
        os.write(self.master, keys.encode())

    def wait(self, pred, seconds=60):
        end = time.time() + seconds
        while time.time() < end:
            if pred():
                return True
            time.sleep(0.02)
        return False

    def prompts(self):
        return re.findall(r"--- prompt \(\d+ tokens\) ---\n(.*?)\n--- end of prompt ---", self.err, re.S)

    def last_user(self):
        ps = self.prompts()
        if not ps:
            return None
        users = re.findall(r"<\|im_start\|>user\n(.*?)<\|im_end\|>", ps[-1], re.S)
        return users[-1] if users else None

    def send(self, keys):
        """Types keys (ending in Enter) and waits for the answer and the next prompt."""
        n = len(self.prompts())
        answers = self.err.count(" tokens, first after ")
        self.type(keys)
        # the answer is over (--stats' line), and libedit shows the next prompt
        ok = self.wait(lambda: len(self.prompts()) > n) and \
            self.wait(lambda: self.err.count(" tokens, first after ") > answers) and \
            self.wait(lambda: self.screen.endswith(b"> "))
        time.sleep(0.05)
        return ok


UP, LEFT, CTRL_A, CTRL_E, BACKSPACE = "\x1b[A", "\x1b[D", "\x01", "\x05", "\x7f"
for binary in binaries:
    tag = "asan" if "/asan/" in binary else "release"
    t = Terminal(binary)
    check(f"{tag}: a prompt on the terminal", t.wait(lambda: b"> " in t.screen), t.screen)
    check(f"{tag}: the sampling settings are shown", t.wait(lambda: "[sampling: temperature 0" in t.err), t.err)
    check(f"{tag}: first message", t.send("Hello there\r") and t.last_user() == "Hello there", (t.last_user(), t.err))
    check(f"{tag}: up arrow recalls it", t.send(UP + "\r") and t.last_user() == "Hello there", t.last_user())
    check(f"{tag}: editing the recalled line",
          t.send(UP + CTRL_A + "Oh, " + CTRL_E + BACKSPACE + "e!" + LEFT + LEFT + "X" + "\r")
          and t.last_user() == "Oh, Hello therXe!", t.last_user())
    n = len(t.prompts())
    t.type("first line\\\r")
    check(f"{tag}: a trailing backslash continues the message",
          t.wait(lambda: t.screen.endswith(b"... ")) and len(t.prompts()) == n, t.screen[-200:])
    check(f"{tag}: ... on the next line", t.send("second line\r") and t.last_user() == "first line\nsecond line",
          t.last_user())
    t.type('"""\r')
    t.type("a block\r")
    t.type("of two lines\r")
    check(f"{tag}: a \"\"\" block", t.send('"""\r') and t.last_user() == "a block\nof two lines", t.last_user())
    n = len(t.prompts())
    t.type("/think off\r")
    check(f"{tag}: /think on a template without the switch",
          t.wait(lambda: "no thinking switch" in t.err) and len(t.prompts()) == n, t.err)
    t.type("/settings\r")
    check(f"{tag}: /settings", t.wait(lambda: t.err.count("[sampling:") >= 2), t.err)
    # the /commands: /help lists them, an unknown one is named and not sent, //text sends /text,
    # /clear forgets the conversation
    n = len(t.prompts())
    t.type("/help\r")
    check(f"{tag}: /help lists the commands", t.wait(lambda: "//TEXT" in t.err) and all(
        w in t.err for w in ("/help", "/clear, /reset", "/settings", "/think on|off", "/image FILE", "/exit, /quit"))
          and len(t.prompts()) == n, t.err[-600:])
    t.type("/foo bar\r")
    check(f"{tag}: an unknown /command is named, not sent",
          t.wait(lambda: "unknown command /foo; /help lists them" in t.err) and len(t.prompts()) == n, t.err[-300:])
    check(f"{tag}: //text sends /text", t.send("//etc/hosts?\r") and t.last_user() == "/etc/hosts?", t.last_user())
    check(f"{tag}: the history is still there", len(re.findall(r"<\|im_start\|>user", t.prompts()[-1])) > 1,
          t.prompts()[-1])
    t.type("/clear\r")
    check(f"{tag}: /clear", t.wait(lambda: "[conversation cleared]" in t.err), t.err[-300:])
    check(f"{tag}: ... forgets the conversation", t.send("Anew\r") and
          re.findall(r"<\|im_start\|>user\n(.*?)<\|im_end\|>", t.prompts()[-1], re.S) == ["Anew"], t.prompts()[-1:])
    t.type("\x04")  # Ctrl-D on an empty line
    try:
        rc = t.p.wait(timeout=60)
    except subprocess.TimeoutExpired:
        t.p.kill()
        rc = -9
    check(f"{tag}: Ctrl-D quits with exit 0", rc == 0 and "Sanitizer" not in t.err, (rc, t.err[-800:]))
    os.close(t.master)

# the same commands with --url (input piped): only messages reach the server; /exit leaves
for binary in binaries[:1]:
    server = subprocess.Popen([binary, "serve", "--port", "0", "--disable-log-stats"], stderr=subprocess.PIPE, text=True)
    url, log = None, []
    for line in server.stderr:
        log.append(line)
        m = re.search(r"serving \S+ on (http://\S+)", line)
        if m:
            url = m.group(1)
            break
    check("--url: the server starts", url is not None, "".join(log))
    if url:
        r = subprocess.run([binary, "chat", "--url", url, "--temperature", "0", "--max-tokens", "4"],
                           input="/help\n/foo\nHello\n//slash\n/clear\nAgain\n/exit\nnot sent\n",
                           capture_output=True, text=True, timeout=120)
        server.send_signal(2)
        log.append(server.stderr.read())
        server.wait(timeout=60)
        prompts = [int(x) for x in re.findall(r"/v1/chat/completions 200: prompt (\d+)", "".join(log))]
        check("--url: /help, /foo, /clear and /exit are not sent; the three messages are",
              r.returncode == 0 and "/exit, /quit" in r.stderr and "unknown command /foo; /help lists them" in r.stderr
              and "[conversation cleared]" in r.stderr and len(prompts) == 3, (r.stderr, prompts))
        check("--url: //slash goes with the history, /clear empties it",
              len(prompts) == 3 and prompts[1] > prompts[0] and prompts[2] < prompts[1], prompts)

print(f"test_chat_terminal.sh: {passed} passed, {failed} failed")
sys.exit(1 if failed else 0)
PY
