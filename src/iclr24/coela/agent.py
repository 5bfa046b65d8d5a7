"""CoELA: Perception, Memory, Communication, Planning and Execution, with an LLM in the two middle ones.

The agent keeps a semantic memory (which rooms are explored, where each object was last seen, what it
holds, what the partner was last seen doing and has claimed) and an episodic one (its plans and the
dialogue). Each time its current plan is done it builds a lettered menu of high-level plans from memory and
asks the planner for one; Execution turns the plan into moves, explorations and grasps in code.

Planners: the LLM (``CoELAAgent(llm)``), ``HeuristicPlanner`` (MHP-like rules over the same memory) and
``RandomPlanner``. The LLM's reply is forced to be one of the menu's lines where the backend can constrain its
output (``choice="constrained"``, the default there); otherwise a free-text reply is parsed as the official parser
does (the option's text contained in the reply, then its letter, then a fuzzy match, then a random pick), with
counts of which rule fired; ``choice="score"`` reads the option letters' next-token log-probabilities.

As in the official agent, a communicating LLM agent writes its message *before* planning, and the menu offers it
as ``send a message: "<text>"``, so the planner sees what it would say.
"""

from __future__ import annotations

import difflib
import random
import re
from collections import Counter
from dataclasses import dataclass, field

from iclr24.coela.env import render_observation
from iclr24.core import check_int

__all__ = ["CoELAAgent", "HeuristicPlanner", "Memory", "Plan", "RandomPlanner", "build_menu", "parse_choice"]

LETTERS = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
CLAIM_STEPS = 10


@dataclass(frozen=True)
class Plan:
    """A high-level plan: ``kind`` in message, grasp, put_in, transport, goto, explore. A message plan's
    ``target`` is the text, when it was written before planning (LLM agents), else empty (the template writes it)."""

    kind: str
    target: str = ""
    container: str = ""

    def describe(self, goal: str = "") -> str:
        if self.kind == "message" and self.target:
            return f'send a message: "{self.target}"'
        return {"message": "send a message",
                "grasp": f"go grasp {'container' if self.container == 'is-container' else 'target object'} "
                         f"{self.target}",
                "put_in": f"put {self.target} into the container {self.container}",
                "transport": f"transport held objects to the {goal}",
                "goto": f"go to {self.target}",
                "explore": f"explore current room {self.target}"}[self.kind]


@dataclass
class Memory:
    """Semantic and episodic memory, updated from observations and messages."""

    name: str
    rooms: list[str] = field(default_factory=list)
    goal: str = ""
    targets: list[str] = field(default_factory=list)
    room: str = ""
    explored: set[str] = field(default_factory=set)
    partner_explored: set[str] = field(default_factory=set)
    seen: dict[str, str] = field(default_factory=dict)            # item -> room where it was last seen
    containers: set[str] = field(default_factory=set)
    holding: list[str] = field(default_factory=list)
    inside: dict[str, list[str]] = field(default_factory=dict)
    delivered: set[str] = field(default_factory=set)
    partner_seen: tuple[str, str, int] | None = None               # (room, doing, step)
    claims: dict[str, int] = field(default_factory=dict)            # partner's "going to grasp" -> step said
    my_claims: dict[str, int] = field(default_factory=dict)
    wins_ties: bool = True                                          # same-step claims: the first agent keeps
    actions: list[str] = field(default_factory=list)
    dialogue: list[tuple[str, str]] = field(default_factory=list)
    step: int = 0
    news: set[str] = field(default_factory=set)                    # discoveries not yet told the partner

    def update(self, obs: dict) -> None:
        """Perception: fold one observation into memory."""
        self.rooms, self.goal, self.targets, self.room = obs["rooms"], obs["goal"], obs["targets"], obs["room"]
        self.step, self.holding, self.inside = obs["step"], list(obs["holding"]), obs["inside"]
        self.delivered = set(obs["delivered"])
        if obs["explored"]:
            self.explored.add(self.room)
            here = set(obs["objects"]) | set(obs["containers"])
            for item, room in list(self.seen.items()):      # gone from here: someone took it
                if room == self.room and item not in here:
                    del self.seen[item]
            for item in here:
                if self.seen.get(item) != self.room:
                    self.news.add(item)
                self.seen[item] = self.room
            self.containers |= set(obs["containers"])
        if obs["partner"]:
            self.partner_seen = (obs["partner"]["room"], obs["partner"]["doing"], obs["step"])
        for text in obs["messages"]:
            self.dialogue.append(("partner", text))
            self.read_message(text)
        for item in [*self.holding, *self.delivered]:          # after the messages: they may be stale
            self.seen.pop(item, None)

    def read_message(self, text: str) -> None:
        """Take what the template sentences of a message say: found items, explored rooms, claims."""
        for items, room in re.findall(r"found ([\w ,]+?) in the ([\w ]+?)(?:[.;]|$)", text):
            for item in re.split(r",\s*|\s+and\s+", items):
                if item.strip() and room.strip() in self.rooms:
                    self.seen.setdefault(item.strip(), room.strip())
        for room in re.findall(r"explored the ([\w ]+?)(?:[.;,]| and|$)", text):
            if room.strip() in self.rooms:
                self.partner_explored.add(room.strip())
        for group in re.findall(r"going to grasp (?:target objects? |containers? )?([\w ,]+)", text):
            for item in re.split(r",\s*|\s+and\s+", group):
                if item.strip():
                    self.claims[item.strip()] = self.step - 1    # sent in the previous step

    @property
    def partner_claims(self) -> set[str]:
        """What the partner said it would grasp, in the last ``CLAIM_STEPS`` steps (claims expire, so two
        agents that claim the same item at once do not both leave it forever)."""
        mine = {item: step for item, step in self.my_claims.items() if self.step - step <= CLAIM_STEPS}
        return {item for item, step in self.claims.items() if self.step - step <= CLAIM_STEPS
                and not (item in mine and (mine[item] < step or (mine[item] == step and self.wins_ties)))}

    def held_targets(self) -> list[str]:
        return [h for h in self.holding if h in self.targets] + [o for c in self.inside.values() for o in c]

    def summary(self) -> str:
        known = ", ".join(f"{item} in the {room}" for item, room in sorted(self.seen.items())) or "none"
        partner = (f"I last saw my partner in the {self.partner_seen[0]}, {self.partner_seen[1]} "
                   f"(step {self.partner_seen[2]})." if self.partner_seen else "I have not seen my partner.")
        return (f"Goal: transport {', '.join(self.targets)} to the {self.goal}.\n"
                f"Delivered so far: {', '.join(sorted(self.delivered)) or 'nothing'}.\n"
                f"Rooms I explored: {', '.join(sorted(self.explored)) or 'none'}; my partner explored: "
                f"{', '.join(sorted(self.partner_explored)) or 'none I know of'}.\n"
                f"Objects and containers I know of: {known}.\n{partner}")


def build_menu(memory: Memory, *, communicate: bool, capacity: int = 3, message: str = "") -> list[Plan]:
    """The lettered options, in a fixed order: message (with its ``message`` text when written beforehand), grasps,
    put-ins, transport, go-tos, explore."""
    menu = []
    if communicate and not (memory.actions and memory.actions[-1] == "send a message"):
        menu.append(Plan("message", message))
    if len(memory.holding) < 2:
        for item in sorted(memory.seen):
            if item in memory.targets and item not in memory.delivered:
                menu.append(Plan("grasp", item))
        if not memory.inside:
            menu += [Plan("grasp", c, "is-container") for c in sorted(memory.seen) if c in memory.containers]
    for container, contents in sorted(memory.inside.items()):
        if len(contents) < capacity:
            menu += [Plan("put_in", h, container) for h in memory.holding if h in memory.targets]
    if memory.held_targets():
        menu.append(Plan("transport"))
    menu += [Plan("goto", r) for r in memory.rooms if r != memory.room]
    if memory.room not in memory.explored:
        menu.append(Plan("explore", memory.room))
    return menu


def parse_choice(reply: str, options: list[str], rng: random.Random) -> tuple[int, str]:
    """The option a free-text reply picks, and which rule fired: contained, letter, fuzzy or random.

    In the official parser's order: the first option whose text the reply contains (a message option by its
    words "send a message", as officially), then a letter, then a fuzzy match, then a random pick. Letters are
    read from "answer/option/plan is X" first, then from a capital letter standing alone or followed by ``.``,
    ``)`` or ``:`` ("B", "(B)"), so the word "I" or "A" opening a sentence is not an option.
    """
    if not isinstance(reply, str):
        raise TypeError(f"reply must be a str, got {type(reply).__name__}")
    if not options or len(options) > len(LETTERS):
        raise ValueError(f"options must hold 1 to {len(LETTERS)} plans, got {len(options)}")
    text = reply.strip().lower().rstrip(".")
    for i, option in enumerate(options):
        words = "send a message" if option.startswith("send a message:") else option
        if words.lower() in text:
            return i, "contained"
    letters = LETTERS[: len(options)]
    match = (re.search(rf"\b(?:option|answer|choose|choice|plan)(?: is)?\W{{0,3}}\(?([{letters}])\b", reply,
                       re.IGNORECASE)
             or re.search(rf"(?:^|[\s(])([{letters}])(?:[.):]|\s*$)", reply.strip()))
    if match and match.group(1).upper() in letters:
        return letters.index(match.group(1).upper()), "letter"
    close = difflib.get_close_matches(text, [o.lower() for o in options], n=1, cutoff=0.6)
    if close:
        return [o.lower() for o in options].index(close[0]), "fuzzy"
    return rng.randrange(len(options)), "random"


class RandomPlanner:
    """Picks a menu option uniformly at random."""

    name = "random"

    def __init__(self, seed: int = 0) -> None:
        self.rng = random.Random(seed)

    def choose(self, agent: CoELAAgent, menu: list[Plan]) -> int:
        return self.rng.randrange(len(menu))


class HeuristicPlanner:
    """MHP-like rules over the agent's memory (the paper's hand-written baseline, in spirit).

    Tell the partner about new targets (when communicating); put a loose target into a held container;
    transport when the hands are full or nothing unclaimed is known; fetch the nearest known, unclaimed
    target; explore the current room; go to the nearest unexplored one. It does not fetch containers: in
    these houses the extra grasp and put-in steps cost more than they save. It reads distances from the
    house's map (``env.path``), which the agents do not observe: a baseline with an advantage.
    """

    name = "heuristic"

    def choose(self, agent: CoELAAgent, menu: list[Plan]) -> int:
        mem, env = agent.memory, agent.env
        kinds = {i: p for i, p in enumerate(menu)}

        def first(pred):
            return next((i for i, p in kinds.items() if pred(p)), None)

        def distance(room: str) -> int:
            return len(env.path(mem.room, room))

        order = []
        if any(item in mem.targets for item in mem.news):     # tell the partner about targets it may not know
            order.append(first(lambda p: p.kind == "message"))
        order.append(first(lambda p: p.kind == "put_in"))
        free = [p for p in menu if p.kind == "grasp" and not p.container and p.target not in mem.partner_claims]
        if free and mem.inside and not any(len(c) < env.container_capacity for c in mem.inside.values()):
            free = []                                   # container full: deliver first
        full = len(mem.holding) >= 2 and not any(p.kind == "put_in" for p in menu)
        if mem.held_targets() and (full or not free):
            order.append(first(lambda p: p.kind == "transport"))
        if free:
            nearest = min(free, key=lambda p: (distance(mem.seen[p.target]), p.target))
            order.append(menu.index(nearest))
        order.append(first(lambda p: p.kind == "explore"))
        unexplored = [p for p in menu if p.kind == "goto" and p.target not in mem.explored | mem.partner_explored]
        if unexplored:
            order.append(menu.index(min(unexplored, key=lambda p: (distance(p.target), p.target))))
        order.append(first(lambda p: p.kind == "transport"))
        return next((i for i in order if i is not None), len(menu) - 1)


# The planning and message prompts share their head (the official templates share goal, progress, previous actions
# and dialogue), so a local model encodes it once for both (coela.cached_lm).
PROMPT_HEAD = """You are {name}, one of two agents in a house. You work with your partner to transport target
objects to the {goal} as quickly as possible. You can hold two things; a container held in a hand carries up
to three objects more. Sending a message costs a step.

{memory}
{observation}
Previous plans (latest last): {actions}
Dialogue (latest last): {dialogue}
"""

PLAN_PROMPT = PROMPT_HEAD + """
Available plans:
{menu}
"""

MESSAGE_PROMPT = PROMPT_HEAD + """
Write one short message to your partner that shares what you found and what you will do next. Be brief and do
not repeat an earlier message.
Message:"""


class CoELAAgent:
    """A cooperative embodied agent with an LLM planner and communicator (or a rule-based ``planner``).

    ``choice="constrained"`` forces the reply to be one of the menu's lines (``iclr24.llm.choose``; backends with
    ``capabilities.grammar``), ``"generate"`` asks for a free reply and parses it, ``"score"`` reads the option
    letters' next-token log-probabilities (local backends); ``"auto"`` is constrained where the backend can, else
    generate. ``cot=True`` first asks the model to think step by step, then for the single best option (two
    calls). ``parse_counts`` records how each plan was read (constrained, scored, or the parsing rule that fired).
    """

    def __init__(self, llm=None, *, planner=None, communicate: bool = True, cot: bool = True,
                 choice: str = "auto", name: str = "alice", seed: int = 0, message_tokens: int = 32,
                 reasoning_tokens: int = 96) -> None:
        if llm is None and planner is None:
            raise ValueError("CoELAAgent needs an llm or a planner")
        if choice not in ("auto", "constrained", "generate", "score"):
            raise ValueError(f"choice must be 'auto', 'constrained', 'generate' or 'score', got {choice!r}")
        if planner is not None and not callable(getattr(planner, "choose", None)):
            raise TypeError(f"planner must have choose(agent, menu), got {type(planner).__name__}")
        if llm is not None and planner is None and not callable(getattr(llm, "generate", None)):
            raise TypeError(f"llm must be a language model with generate() (iclr24.llm), got {type(llm).__name__}")
        for flag, value in (("communicate", communicate), ("cot", cot)):
            if not isinstance(value, bool):
                raise TypeError(f"{flag} must be a bool, got {value!r}")
        seed = check_int("seed", seed)
        message_tokens = check_int("message_tokens", message_tokens, minimum=1)
        reasoning_tokens = check_int("reasoning_tokens", reasoning_tokens, minimum=1)
        if choice == "auto":
            choice = "constrained" if llm is not None and llm.capabilities.grammar else "generate"
        elif choice == "constrained" and planner is None and not llm.capabilities.grammar:
            raise ValueError(f"choice='constrained' needs a backend that constrains its output "
                             f"(capabilities.grammar); {llm!r} cannot: use choice='generate' or 'score'")
        self.llm, self.planner, self.communicate, self.cot, self.choice = llm, planner, communicate, cot, choice
        self.name, self.rng = name, random.Random(seed)
        self.message_tokens, self.reasoning_tokens = message_tokens, reasoning_tokens
        self.memory = Memory(name)
        self.parse_counts: Counter = Counter()
        self.llm_calls = 0
        self.plan: Plan | None = None
        self.env = None
        self.last_observation: dict | None = None

    def reset(self, env) -> None:
        self.env, self.memory, self.plan = env, Memory(self.name), None
        self.memory.wins_ties = self.name == env.possible_agents[0]

    # -- the step loop -----------------------------------------------------------------------------------------
    def act(self, obs: dict) -> dict:
        """Perception, then (when the current plan is done) Planning, then Execution: one primitive action."""
        if self.env is None:
            raise RuntimeError("call reset(env) (or run_episode) before act()")
        self.memory.update(obs)
        self.last_observation = obs
        for _ in range(3):                      # a plan that is already done or impossible yields a new one
            if self.plan is None:
                self.plan = self.choose_plan()
                self.memory.actions.append("send a message" if self.plan.kind == "message" else
                                           self.plan.describe(self.memory.goal))
                if self.plan.kind == "message":
                    return self._message()
            action = self._execute(self.plan)
            if action is not None:
                return action
            self.plan = None
        return {"type": "wait"}

    def choose_plan(self) -> Plan:
        communicate = self.communicate and len(self.env.possible_agents) > 1
        if self.planner is not None:
            menu = build_menu(self.memory, communicate=communicate, capacity=self.env.container_capacity)
            return menu[self.planner.choose(self, menu)]
        fields = dict(name=self.name, goal=self.memory.goal, memory=self.memory.summary(),
                      observation=render_observation(self.last_observation),
                      actions="; ".join(self.memory.actions[-10:]) or "none",
                      dialogue=" | ".join(f"{who}: {text}" for who, text in self.memory.dialogue[-3:]) or "none")
        message = ""
        if communicate and not (self.memory.actions and self.memory.actions[-1] == "send a message"):
            message = self._write_message(MESSAGE_PROMPT.format(**fields))   # Communication, before Planning
        menu = build_menu(self.memory, communicate=communicate and bool(message),
                          capacity=self.env.container_capacity, message=message)
        lines = [f"{LETTERS[i]}. {p.describe(self.memory.goal)}" for i, p in enumerate(menu)]
        prompt = PLAN_PROMPT.format(**fields, menu="\n".join(lines))
        if self.choice == "score":
            index = self._score_letters(prompt + "Answer with the letter of the best plan.", len(menu))
            self.parse_counts["scored"] += 1
            return menu[index]
        final = "Answer with the best next plan, as it is written above." if self.choice == "constrained" else \
            "Answer with the letter of the best next plan."
        messages = [{"role": "user", "content": prompt + ("Let's think step by step about the best next plan."
                                                          if self.cot else final)}]
        if self.cot:
            reply = self._generate(messages, self.reasoning_tokens)
            messages += [{"role": "assistant", "content": reply},
                         {"role": "user", "content": "So the single best plan is which one? " + final}]
        if self.choice == "constrained":
            from iclr24.llm import choose

            self.llm_calls += 1
            index = choose(self.llm, messages, lines).index
            self.parse_counts["constrained"] += 1
            return menu[index]
        index, rule = parse_choice(self._generate(messages, 12), [line[3:] for line in lines], self.rng)
        self.parse_counts[rule] += 1
        return menu[index]

    def _write_message(self, prompt: str) -> str:
        """The LLM's message: its quoted part where it has one (as the official agent keeps), else its first line,
        without quotes (a reply cut at ``message_tokens`` may open a quote it never closes)."""
        reply = self._generate([{"role": "user", "content": prompt}], self.message_tokens)
        quoted = re.search(r'"([^"]+)"', reply)
        text = quoted.group(1) if quoted else reply.strip().split("\n")[0]
        return " ".join(text.strip('"').split())      # one line: it becomes a menu line

    def _score_letters(self, prompt: str, n: int) -> int:
        from iclr24.llm import reply_logprobs

        logprobs = reply_logprobs(self.llm, [{"role": "user", "content": prompt}])
        self.llm_calls += 1
        scores = [float(logprobs[self.llm.tokenize(letter)[0]]) for letter in LETTERS[:n]]
        return max(range(n), key=lambda i: scores[i])

    def _generate(self, messages, max_tokens: int) -> str:
        self.llm_calls += 1
        return self.llm.generate(messages, max_tokens=max_tokens, temperature=0.0)[0].text

    # -- communication -----------------------------------------------------------------------------------------
    def _message(self) -> dict:
        """Send the message plan's text (written by the LLM before planning), or the rule-based template's."""
        mem = self.memory
        found = sorted(mem.news)
        if self.plan.target:
            text = self.plan.target
        else:
            by_room: dict[str, list[str]] = {}
            for item in found:
                by_room.setdefault(mem.seen.get(item, mem.room), []).append(item)
            parts = [f"I found {', '.join(items)} in the {room}." for room, items in sorted(by_room.items())]
            if mem.explored:
                parts.append(f"I explored the {', '.join(sorted(mem.explored))}.")
            mine = self._claimable()
            if mine:
                parts.append(f"I am going to grasp {', '.join(mine)}.")
                mem.my_claims.update({item: mem.step for item in mine})
            text = " ".join(parts) or "Nothing new."
        mem.news.clear()
        mem.dialogue.append((self.name, text))
        self.plan = None
        return {"type": "message", "text": text}

    def _claimable(self) -> list[str]:
        """The nearest free targets this agent can still carry (free hands plus container space)."""
        mem, room_for = self.memory, 2 - len(self.memory.holding)
        room_for += sum(self.env.container_capacity - len(c) for c in mem.inside.values())
        free = [i for i in mem.seen if i in mem.targets and i not in mem.delivered and i not in mem.partner_claims]
        free.sort(key=lambda i: (len(self.env.path(mem.room, mem.seen[i])), i))
        return free[:max(0, room_for)]

    # -- execution ---------------------------------------------------------------------------------------------
    def _execute(self, plan: Plan) -> dict | None:
        """The next primitive action of ``plan``, or None when it is done or cannot go on."""
        mem = self.memory
        if plan.kind == "explore":
            return {"type": "explore"} if mem.room not in mem.explored else None
        if plan.kind == "goto":
            return {"type": "move", "room": plan.target} if mem.room != plan.target else None
        if plan.kind == "put_in":
            if plan.target in mem.holding and plan.container in mem.inside:
                return {"type": "put_in", "item": plan.target, "container": plan.container}
            return None
        if plan.kind == "transport":
            if not mem.held_targets():
                return None
            return {"type": "drop_at_goal"} if mem.room == mem.goal else {"type": "move", "room": mem.goal}
        if plan.kind == "grasp":
            room = mem.seen.get(plan.target)
            if plan.target in mem.holding or room is None or len(mem.holding) >= 2:
                return None
            if mem.room != room:
                return {"type": "move", "room": room}
            if mem.room not in mem.explored:
                return {"type": "explore"}
            return {"type": "grasp", "item": plan.target}
        return None
