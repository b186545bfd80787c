"""Transparent mode with real packets (Linux): a network namespace holds Glider, a TLS
test origin on 192.0.2.1:443 and the client processes; Glider's iptables rules redirect
the clients' port-443 connections to its transparent door. Checked: the selected
process (`curl`, named in mitm.transparent_processes) is decrypted, another process
(the same curl binary under another name) goes straight through and sees the origin's
own certificate, enrollment narrows selection, a connection to the door that was not
redirected is refused, a clean stop leaves no rule, and after SIGKILL the next start
warns with the exact command and `glider transparent cleanup` removes the chain. IPv6
(ip6tables, a second origin on 2001:db8::1) is covered where the namespace supports it.
Last, the real Claude Code with no proxy setting is caught by name and answered locally.

Needs root (or CAP_SYS_ADMIN + CAP_NET_ADMIN) for `ip netns`; when that or iptables is
refused, the test says so loudly (a pytest warning and the skip reason) and skips. A
missing tool (ip, iptables, curl, openssl) is a failure: `.ci/run` installs them."""

import json
import os
import pathlib
import shutil
import signal
import subprocess
import sys
import time
import warnings

import pytest

from conftest import Process, _binary, poll

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent / "cli"))
from test_mitm_clis import make_origin_certs  # noqa: E402  (the MITM suite's origin certificates)

HERE = pathlib.Path(__file__).resolve().parent
ORIGIN_IP = "192.0.2.1"
ORIGIN_IP6 = "2001:db8::1"
HOST = "api.anthropic.com"
CHAIN = "GLIDER_TRANSPARENT"
MARK = "hello-from-the-real-origin"


def skip_loudly(why):
    message = f"TRANSPARENT MODE NOT TESTED: {why}"
    print(message, file=sys.stderr)
    warnings.warn(message)
    pytest.skip(message)


def sh(*args, check=True, timeout=30, **kwargs):
    return subprocess.run(list(args), capture_output=True, text=True, check=check, timeout=timeout, **kwargs)


class Netns:
    def __init__(self, name):
        self.name = name

    def cmd(self, *args):
        return ["ip", "netns", "exec", self.name, *args]

    def run(self, *args, check=True, timeout=30, **kwargs):
        return sh(*self.cmd(*args), check=check, timeout=timeout, **kwargs)

    def nat_rules(self):
        """`iptables -S` (and ip6tables) of the nat table, as text."""
        text = self.run("iptables", "-t", "nat", "-S").stdout
        six = self.run("ip6tables", "-t", "nat", "-S", check=False)
        return text + (six.stdout if six.returncode == 0 else "")

    def chain_exists(self):
        return self.run("iptables", "-t", "nat", "-S", CHAIN, check=False).returncode == 0


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    for tool in ("ip", "iptables", "curl", "openssl"):
        if shutil.which(tool) is None:
            pytest.fail(f"{tool} is missing: .ci/run installs it (apt-get install iproute2 iptables curl openssl)")
    if not sys.platform.startswith("linux"):
        skip_loudly(f"transparent mode is Linux-only here, and this is {sys.platform}")
    ns = Netns(f"glider-tp-{os.getpid()}")
    made = sh("ip", "netns", "add", ns.name, check=False)
    if made.returncode != 0:
        skip_loudly(f"`ip netns add` was refused ({made.stderr.strip()}); run as root or with CAP_SYS_ADMIN and CAP_NET_ADMIN")
    origin = origin6 = None
    started = []  # every Glider a test starts: stopped here even when a test fails
    try:
        ns.run("ip", "link", "set", "lo", "up")
        ns.run("ip", "addr", "add", f"{ORIGIN_IP}/32", "dev", "lo")
        # IPv6 is tested where the namespace has it and ip6tables' nat table works.
        ipv6 = (ns.run("ip", "-6", "addr", "add", f"{ORIGIN_IP6}/128", "dev", "lo", "nodad", check=False).returncode == 0
                and ns.run("ip6tables", "-t", "nat", "-S", check=False).returncode == 0)
        nat = ns.run("iptables", "-t", "nat", "-S", check=False)
        if nat.returncode != 0:
            skip_loudly(f"iptables' nat table is refused in a network namespace ({nat.stderr.strip()})")
        tmp = tmp_path_factory.mktemp("transparent")
        origin_ca, cert, key = make_origin_certs(tmp)
        origin = Process(ns.cmd(sys.executable, str(HERE / "origin.py"), ORIGIN_IP, "443", str(cert), str(key)),
                         r"origin listening on")
        if ipv6:
            origin6 = Process(ns.cmd(sys.executable, str(HERE / "origin.py"), ORIGIN_IP6, "443", str(cert), str(key)),
                              r"origin listening on")
        else:
            message = "TRANSPARENT MODE OVER IPv6 NOT TESTED: no IPv6 or no ip6tables nat table in the namespace"
            print(message, file=sys.stderr)
            warnings.warn(message)
        # The same curl under another image name: a process the filter does not select.
        plain = tmp / "plaincurl"
        shutil.copy(shutil.which("curl"), plain)
        yield {"ns": ns, "tmp": tmp, "origin": origin, "origin6": origin6, "origin_ca": origin_ca,
               "plaincurl": str(plain), "started": started}
    finally:
        for glider in started:
            glider.stop()
        for process in (origin, origin6):
            if process:
                process.stop()
        # Deleting the namespace takes its iptables rules with it.
        sh("ip", "netns", "del", ns.name, check=False)


def write_config(lab):
    config = lab["tmp"] / "glider.yaml"
    config.write_text(f"""
backends:
  - {{name: local, type: ollama, base_url: 'http://127.0.0.1:9', models: [qwen-local]}}
routing: {{cloud_fallback: false}}
mitm:
  enabled: true
  port: 8082
  hosts: [{HOST}]
  transparent: true
  transparent_port: 8083
  transparent_ports: [443]
  transparent_processes: [curl]
  upstream_overrides: {{{HOST}: '{ORIGIN_IP}:443'}}
  upstream_ca_file: '{lab["origin_ca"]}'
""")
    return config


def glider_args(lab):
    return lab["ns"].cmd(_binary("glider"), "serve", "-c", str(write_config(lab)), "--port", "0",
                         "--dashboard-port", "0")


def glider_env(lab):
    env = {k: v for k, v in os.environ.items() if k.lower() not in ("https_proxy", "http_proxy", "all_proxy")}
    env.update(GLIDER_HOME=str(lab["tmp"] / "home"), GLIDER_LOG="info", NO_COLOR="1")
    return env


def start_glider(lab):
    glider = Process(glider_args(lab), r"glider dashboard on (http://\S+)", env=glider_env(lab))
    lab["started"].append(glider)
    glider.dashboard = glider.match.group(1)
    assert any("glider transparent door on 127.0.0.1:8083" in line for line in glider.lines), glider.lines
    return glider


def curl(lab, ca, binary="curl", path="/v1/models", data=None, ip=ORIGIN_IP):
    """A client request to https://api.anthropic.com (resolved to the origin's address
    `ip`) trusting only `ca`: (exit code, body, stderr)."""
    resolved = f"[{ip}]" if ":" in ip else ip
    args = [binary, "-sS", "--max-time", "20", "--cacert", str(ca), "--resolve",
            f"{HOST}:443:{resolved}", f"https://{HOST}{path}"]
    if data is not None:
        args += ["-H", "content-type: application/json", "-H", "x-api-key: sk-ant-user-key",
                 "-H", "anthropic-version: 2023-06-01", "--data", json.dumps(data)]
    done = lab["ns"].run(*args, check=False)
    return done.returncode, done.stdout, done.stderr


def dashboard(lab, glider, method, path, body=None):
    args = ["curl", "-sS", "--max-time", "10", "-X", method, f"{glider.dashboard}{path}"]
    if body is not None:
        args += ["-H", "content-type: application/json", "--data", json.dumps(body)]
    return json.loads(lab["ns"].run(*args).stdout)




def glider_ca(lab):
    return lab["tmp"] / "home" / "mitm" / "ca.crt"


def test_selection_by_process_and_enrollment(lab):
    ns, origin = lab["ns"], lab["origin"]
    glider = start_glider(lab)
    try:
        assert f"-A OUTPUT -p tcp -j {CHAIN}" in ns.nat_rules()

        # The selected process: Glider decrypts (curl trusts only Glider's CA and gets
        # through), forwards to the origin through its marked socket (no loop), and
        # says which process it decrypted for.
        code, body, err = curl(lab, glider_ca(lab))
        assert code == 0, err
        assert json.loads(body)["origin"] == MARK
        origin.wait_for(r"REQUEST GET /v1/models", timeout=10)
        decrypted = glider.wait_for(r"transparent: decrypting for pid (\d+) \(curl\)", timeout=10)
        assert int(decrypted.group(1)) > 0

        # IPv6 too (ip6tables, SO_ORIGINAL_DST for IPv6, /proc/net/tcp6): decrypted for
        # curl, straight to the IPv6 origin for the other process.
        if lab["origin6"]:
            assert any("[::1]:8083" in line for line in glider.lines), glider.lines
            code, body, err = curl(lab, glider_ca(lab), ip=ORIGIN_IP6)
            assert code == 0, err
            code, body, err = curl(lab, lab["origin_ca"], binary=lab["plaincurl"], ip=ORIGIN_IP6)
            assert code == 0, err
            lab["origin6"].wait_for(r"REQUEST GET /v1/models", timeout=10)

        # A model request through the pipeline: it goes to the origin (no local model
        # for it) with the user's key unchanged, and the dashboard records it.
        code, body, err = curl(lab, glider_ca(lab), path="/v1/messages",
                               data={"model": "claude-sonnet-4-5", "max_tokens": 16,
                                     "messages": [{"role": "user", "content": "hi"}]})
        assert code == 0, err
        assert json.loads(body)["content"][0]["text"] == MARK
        seen = origin.wait_for(r"REQUEST POST /v1/messages (.*)", timeout=10)
        assert json.loads(seen.group(1))["x-api-key"] == "sk-ant-user-key"
        recorded = poll(lambda: [r for r in dashboard(lab, glider, "GET", "/api/requests")["requests"]
                                 if r.get("door") == "mitm"])
        assert recorded, "the dashboard never listed the decrypted request"

        # Another process (same binary, another image name) goes straight through: it
        # sees the origin's own certificate, and Glider's CA does not work for it.
        code, body, err = curl(lab, lab["origin_ca"], binary=lab["plaincurl"])
        assert code == 0, err
        assert json.loads(body)["origin"] == MARK
        code, _, err = curl(lab, glider_ca(lab), binary=lab["plaincurl"])
        assert code == 60, f"expected a certificate error, got {code}: {err}"

        # Enrollment narrows: with another PID enrolled, curl is no longer decrypted.
        other = origin.proc.pid
        assert dashboard(lab, glider, "POST", "/api/mitm/enrollment", {"pids": [other]}) == \
            {"pids": [other], "active": True}
        code, body, err = curl(lab, lab["origin_ca"])
        assert code == 0, err
        code, _, err = curl(lab, glider_ca(lab))
        assert code == 60, f"expected a certificate error, got {code}: {err}"

        # An enrolled curl is decrypted: the shell waits until its PID is enrolled, then
        # becomes curl (exec keeps the PID).
        waiting = subprocess.Popen(
            ns.cmd("sh", "-c", 'read go; exec "$@"', "sh", "curl", "-sS", "--max-time", "20", "--cacert",
                   str(glider_ca(lab)), "--resolve", f"{HOST}:443:{ORIGIN_IP}", f"https://{HOST}/v1/models"),
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            dashboard(lab, glider, "POST", "/api/mitm/enrollment", {"pids": [other, waiting.pid]})
            out, err = waiting.communicate("go\n", timeout=30)
        finally:
            if waiting.poll() is None:
                waiting.kill()
                waiting.wait()
        assert waiting.returncode == 0, err
        assert json.loads(out)["origin"] == MARK
        glider.wait_for(rf"transparent: decrypting for pid {waiting.pid} \(curl\)", timeout=10)

        # An empty array clears the enrollment: curl is decrypted again.
        assert dashboard(lab, glider, "POST", "/api/mitm/enrollment", {"pids": []})["pids"] == []
        code, _, err = curl(lab, glider_ca(lab))
        assert code == 0, err

        # `glider transparent cleanup` does not take a running Glider's rules away.
        refused = ns.run(_binary("glider"), "transparent", "cleanup", env=glider_env(lab), check=False)
        assert refused.returncode != 0 and f"pid {glider.proc.pid}" in refused.stderr, refused.stderr
        assert ns.chain_exists()

        # The door is not a proxy: a connection that was not redirected is refused.
        direct = ns.run("curl", "-sS", "--max-time", "10", "http://127.0.0.1:8083/", check=False)
        assert direct.returncode != 0
        glider.wait_for(r"refused a connection from .*: it was not redirected", timeout=10)
    finally:
        glider.stop()

    # A clean stop (SIGTERM) removes every rule and records it.
    assert glider.proc.returncode == 0, "".join(glider.lines)
    rules = ns.nat_rules()
    assert "GLIDER" not in rules, rules
    record = json.loads((lab["tmp"] / "home" / "runstate.json").read_text())
    assert record["redirect"]["removed_at"] and record["stopped_at"], record


def test_sigkill_then_restart_warns_and_cleanup_removes_the_chain(lab):
    ns = lab["ns"]
    glider = start_glider(lab)
    glider.proc.send_signal(signal.SIGKILL)
    glider.proc.wait(timeout=10)
    assert ns.chain_exists(), "SIGKILL runs no code: the chain must still be there"

    # The next start warns with the exact command, and refuses to install over the
    # leftover chain (it does not repair by itself).
    again = sh(*glider_args(lab), check=False, timeout=60, env=glider_env(lab))
    output = again.stdout + again.stderr
    assert again.returncode != 0, output
    assert "did not stop cleanly" in output, output
    assert f"iptables -t nat -L {CHAIN} -n -v" in output, output
    assert "glider transparent cleanup" in output, output
    assert ns.chain_exists()

    cleanup = ns.run(_binary("glider"), "transparent", "cleanup", "-c", str(write_config(lab)),
                     env=glider_env(lab))
    assert f"removed the redirect chain {CHAIN}" in cleanup.stdout, cleanup.stdout + cleanup.stderr
    rules = ns.nat_rules()
    assert "GLIDER" not in rules, rules
    again = ns.run(_binary("glider"), "transparent", "cleanup", env=glider_env(lab))
    assert "nothing to remove" in again.stdout

    # After the cleanup Glider starts again and stops cleanly.
    glider = start_glider(lab)
    glider.stop()
    assert glider.proc.returncode == 0, "".join(glider.lines)
    assert "GLIDER" not in ns.nat_rules()



def test_a_start_up_error_after_the_rules_went_in_takes_them_back_quietly(lab):
    """The rules go in before the other doors open; when one cannot (here the
    dashboard's port is the MITM's own), Glider exits with the error, takes the rules
    back and records an orderly exit: the next start has nothing to warn about."""
    ns = lab["ns"]
    args = ns.cmd(_binary("glider"), "serve", "-c", str(write_config(lab)), "--port", "0",
                  "--dashboard-port", "8082")
    failed = sh(*args, check=False, timeout=60, env=glider_env(lab))
    output = failed.stdout + failed.stderr
    assert failed.returncode != 0 and "server.dashboard_port" in output, output
    assert "glider transparent door on" in output, output
    assert "GLIDER" not in ns.nat_rules()
    record = json.loads((lab["tmp"] / "home" / "runstate.json").read_text())
    assert record["stopped_at"] and record["redirect"]["removed_at"], record
    glider = start_glider(lab)
    try:
        warned = [line for line in glider.lines if "did not stop cleanly" in line or "not removed" in line]
        assert not warned, warned
    finally:
        glider.stop()

def test_real_claude_code_with_no_proxy_setting_is_answered_locally(lab, tmp_path):
    """The spec's live test, on loopback: the real Claude Code (from npm), with no proxy
    variable and no base URL, talks to https://api.anthropic.com as it always does; the
    redirect sends its connection to Glider, which picks it by the vendor registry's
    name (`claude`, nothing in mitm.transparent_processes) and answers from a local
    model. The only help it gets is trusting Glider's CA (NODE_EXTRA_CA_CERTS)."""
    sys.path.insert(0, str(HERE.parent / "cli"))
    from test_real_clis import cli, run  # noqa: E402  (the real CLIs' suite: npm install and a bounded run)

    ns = lab["ns"]
    claude = cli("claude")
    # `ip netns exec` mounts /etc/netns/<name>/hosts over /etc/hosts: the CLI resolves
    # api.anthropic.com to the test origin's address, as DNS would give it the real one.
    etc = pathlib.Path("/etc/netns") / ns.name
    etc.mkdir(parents=True, exist_ok=True)
    (etc / "hosts").write_text(f"127.0.0.1 localhost\n{ORIGIN_IP} {HOST}\n")
    mock = glider = None
    try:
        mock = Process(ns.cmd(_binary("glider-mock"), "--port", "0"), r"listening on (127\.0\.0\.1:\d+)")
        config = tmp_path / "glider.yaml"
        config.write_text(f"""
backends:
  - {{name: local, type: ollama, base_url: 'http://{mock.match.group(1)}', models: [qwen-local]}}
model_aliases: {{'claude-local-*': qwen-local}}
routing: {{cloud_fallback: false}}
mitm:
  enabled: true
  hosts: [{HOST}]
  transparent: true
  upstream_overrides: {{{HOST}: '{ORIGIN_IP}:443'}}
  upstream_ca_file: '{lab["origin_ca"]}'
""")
        home = tmp_path / "glider-home"
        env = glider_env(lab)
        env["GLIDER_HOME"] = str(home)
        glider = Process(ns.cmd(_binary("glider"), "serve", "-c", str(config), "--port", "0", "--dashboard-port", "0"),
                         r"glider dashboard on (http://\S+)", env=env)
        lab["started"].append(glider)

        user = tmp_path / "user"
        work = tmp_path / "work"
        user.mkdir()
        work.mkdir()
        claude_env = {k: v for k, v in os.environ.items()
                      if k.lower() not in ("https_proxy", "http_proxy", "all_proxy", "no_proxy",
                                           "anthropic_base_url", "node_extra_ca_certs", "ssl_cert_file")}
        claude_env.update(HOME=str(user), ANTHROPIC_API_KEY="sk-ant-user-own-key",
                          NODE_EXTRA_CA_CERTS=str(home / "mitm" / "ca.crt"),
                          CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC="1", DISABLE_TELEMETRY="1",
                          DISABLE_ERROR_REPORTING="1", DISABLE_AUTOUPDATER="1", CLAUDE_CODE_MAX_RETRIES="0")
        code, out, err = run(ns.cmd(claude, "-p", "say hi transparently", "--model", "claude-local-1",
                                    "--output-format", "json"), claude_env, work)
        assert code == 0, f"claude failed ({code})\nstdout: {out[-3000:]}\nstderr: {err[-3000:]}\nglider: {''.join(glider.lines)[-3000:]}"
        result = json.loads(out)
        # glider-mock's Ollama echoes the prompt: the local model answered.
        assert "echo:" in result["result"] and "say hi transparently" in result["result"], result
        picked = glider.wait_for(r"transparent: decrypting for pid \d+ \((\S+)\)", timeout=10)
        assert picked.group(1).startswith("claude"), picked.group(0)
        glider.wait_for(r"answered locally", timeout=10)
    finally:
        if glider:
            glider.stop()
        if mock:
            mock.stop()
        shutil.rmtree(etc, ignore_errors=True)
