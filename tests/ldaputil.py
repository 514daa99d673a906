"""A real OpenLDAP directory (Debian's slapd) for tests, on 127.0.0.1.

`Directory(folder).start()` writes a slapd.conf, turns it into a cn=config folder with
slaptest, seeds an mdb database with slapadd (people under ou=people, groupOfNames under
ou=groups, passwords hashed by slappasswd) and runs slapd in the foreground on a free port.
Everything (config, database, pid file, log) lives under `folder`; slapd is the test's own
child, killed with the test process if that dies (PR_SET_PDEATHSIG), and `stop()` ends it
with tools/k8s/procutil and removes the folder.

Changes while it runs go through ldapmodify as the directory's manager, as an admin's would.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
from dataclasses import dataclass
from pathlib import Path

from serverutil import ChildServer, free_port, wait_for

SLAPD = "/usr/sbin/slapd"
SCHEMA_DIR = Path("/etc/ldap/schema")
MODULE_DIR = Path("/usr/lib/ldap")
TOOLS = ("/usr/sbin/slapd", "/usr/sbin/slaptest", "/usr/sbin/slapadd", "/usr/sbin/slappasswd", "ldapmodify", "ldapsearch")
SUFFIX = "dc=paddlecloud,dc=test"
MANAGER_DN = f"cn=manager,{SUFFIX}"
PEOPLE = f"ou=people,{SUFFIX}"
GROUPS = f"ou=groups,{SUFFIX}"


@dataclass(frozen=True)
class Person:
    uid: str
    password: str


# The seeded tree: who is in which group. Groups are groupOfNames (members by DN) except those
# in POSIX_GROUPS, posixGroup (members by uid, memberUid), the two kinds directories use.
PEOPLE_SEED = (Person("alice", "alice-ldap-pw"), Person("bob", "bob-ldap-pw"), Person("eve", "eve-ldap-pw"))
GROUPS_SEED = {"vision": ("alice", "bob"), "audio": ("alice", "bob"), "hub-admins": ("alice",), "outsiders": ("eve",)}
POSIX_GROUPS = {"audio": 5001}  # name -> gidNumber


def missing_tools() -> list[str]:
    return [name for name in TOOLS if not shutil.which(name)]


def person_dn(uid: str) -> str:
    return f"uid={uid},{PEOPLE}"


def group_dn(name: str) -> str:
    return f"cn={name},{GROUPS}"


def _run(args: list[str], input: str | None = None) -> str:
    done = subprocess.run(args, input=input, capture_output=True, text=True, timeout=60)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(args[:3])} failed ({done.returncode}): {done.stderr.strip()[-2000:]}")
    return done.stdout


class Directory(ChildServer):
    """One slapd with the seeded tree; `url`, `manager_password`, `start()`, `stop()`."""

    label = "slapd"
    log_name = "slapd.log"

    def __init__(self, folder: Path):
        super().__init__(folder)
        self.port = free_port()
        self.url = f"ldap://127.0.0.1:{self.port}"
        self.manager_password = "manager-ldap-pw"

    # --- files ------------------------------------------------------------------------

    def slapd_conf(self) -> str:
        schemas = "\n".join(f"include {SCHEMA_DIR / name}.schema" for name in ("core", "cosine", "nis", "inetorgperson"))
        return f"""{schemas}
pidfile {self.folder / 'slapd.pid'}
modulepath {MODULE_DIR}
moduleload back_mdb
database config
database mdb
maxsize 67108864
suffix "{SUFFIX}"
rootdn "{MANAGER_DN}"
rootpw {_run(['/usr/sbin/slappasswd', '-s', self.manager_password]).strip()}
directory {self.folder / 'data'}
access to attrs=userPassword by self write by anonymous auth by * none
access to * by * read
"""

    def seed_ldif(self) -> str:
        entries = [f"dn: {SUFFIX}\nobjectClass: dcObject\nobjectClass: organization\ndc: paddlecloud\no: PaddleCloud test",
                   f"dn: {PEOPLE}\nobjectClass: organizationalUnit\nou: people",
                   f"dn: {GROUPS}\nobjectClass: organizationalUnit\nou: groups"]
        for person in PEOPLE_SEED:
            hashed = _run(["/usr/sbin/slappasswd", "-s", person.password]).strip()
            entries.append(f"dn: {person_dn(person.uid)}\nobjectClass: inetOrgPerson\nuid: {person.uid}\n"
                           f"cn: {person.uid.title()}\nsn: {person.uid.title()}\nmail: {person.uid}@paddlecloud.test\n"
                           f"userPassword: {hashed}")
        for name, members in GROUPS_SEED.items():
            if name in POSIX_GROUPS:
                entries.append(f"dn: {group_dn(name)}\nobjectClass: posixGroup\ncn: {name}\n"
                               f"gidNumber: {POSIX_GROUPS[name]}\n" + "\n".join(f"memberUid: {uid}" for uid in members))
                continue
            # groupOfNames must have a member: the manager stays in each, so any person can be taken out
            entries.append(f"dn: {group_dn(name)}\nobjectClass: groupOfNames\ncn: {name}\nmember: {MANAGER_DN}\n"
                           + "\n".join(f"member: {person_dn(uid)}" for uid in members))
        return "\n\n".join(entries) + "\n"

    # --- lifecycle ----------------------------------------------------------------------

    def start(self, timeout: float = 60) -> "Directory":
        missing = missing_tools()
        if missing:
            raise RuntimeError(f"OpenLDAP tools missing: {', '.join(missing)} (make login-deps installs slapd and "
                               "ldap-utils)")
        (self.folder / "data").mkdir(parents=True, exist_ok=True)
        (self.folder / "slapd.d").mkdir(exist_ok=True)
        conf = self.folder / "slapd.conf"
        conf.write_text(self.slapd_conf())
        seed = self.folder / "seed.ldif"
        seed.write_text(self.seed_ldif())
        # slapadd creates the mdb database from the seed; slaptest then checks the config
        # (it opens that database) and turns it into the cn=config folder slapd runs from
        _run(["/usr/sbin/slapadd", "-f", str(conf), "-b", SUFFIX, "-l", str(seed)])
        _run(["/usr/sbin/slaptest", "-f", str(conf), "-F", str(self.folder / "slapd.d")])
        # -d: stay in the foreground (our child, stopped by us); stats: one line per operation
        self.spawn([SLAPD, "-d", "stats", "-F", str(self.folder / "slapd.d"), "-h", f"{self.url}/"])

        def answering() -> bool:
            self.check_alive()
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=2).close()
            except OSError:
                return False
            return True

        wait_for(answering, timeout, f"slapd to listen on {self.url}", interval=0.2)
        return self

    # --- the directory admin's changes -----------------------------------------------------

    def modify(self, ldif: str) -> None:
        _run(["ldapmodify", "-x", "-H", self.url, "-D", MANAGER_DN, "-w", self.manager_password], input=ldif)

    def _member(self, group: str, uid: str) -> tuple[str, str]:
        """The attribute and value that make `uid` a member of `group`."""
        return ("memberUid", uid) if group in POSIX_GROUPS else ("member", person_dn(uid))

    def remove_member(self, group: str, uid: str) -> None:
        attribute, value = self._member(group, uid)
        self.modify(f"dn: {group_dn(group)}\nchangetype: modify\ndelete: {attribute}\n{attribute}: {value}\n")

    def add_member(self, group: str, uid: str) -> None:
        attribute, value = self._member(group, uid)
        self.modify(f"dn: {group_dn(group)}\nchangetype: modify\nadd: {attribute}\n{attribute}: {value}\n")

    def members(self, group: str) -> list[str]:
        out = _run(["ldapsearch", "-x", "-LLL", "-H", self.url, "-b", group_dn(group), "-s", "base", "member",
                    "memberUid"])
        return sorted(line.split(": ", 1)[1].removeprefix("uid=").split(",", 1)[0] for line in out.splitlines()
                      if line.startswith(("member: uid=", "memberUid: ")))
