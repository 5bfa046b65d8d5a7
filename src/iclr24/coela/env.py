"""A text multi-room transport world in the style of TDW-MAT, with a PettingZoo-parallel API.

Agents move between rooms (one hop a step along the house's corridors), explore a room to see its objects
(contents are unknown until then: partial observability), grasp target objects and containers (two hands;
a held container carries up to ``container_capacity`` objects more), and transport what they hold to the
goal room. A message to the partner costs the sender a step. The episode ends when every target is at the
goal or after ``max_steps`` steps.

Actions (one per agent per step), as dicts: ``{"type": "move", "room": r}`` (one hop toward ``r``),
``{"type": "explore"}``, ``{"type": "grasp", "item": name}`` (in the current, explored room),
``{"type": "put_in", "item": obj, "container": c}`` (both held), ``{"type": "drop_at_goal"}`` (in the goal
room: delivers every held target), ``{"type": "message", "text": str}`` and ``{"type": "wait"}``.
"""

from __future__ import annotations

import random
from collections import deque
from dataclasses import dataclass, field

from iclr24.core import check_int

__all__ = ["ROOM_NAMES", "TransportEnv", "render_observation"]

ROOM_NAMES = ("living room", "kitchen", "bedroom", "office", "bathroom", "dining room", "garage", "study")
OBJECT_NAMES = ("apple", "banana", "orange", "bread", "loaf", "burger", "iphone", "ipod", "pen", "lighter",
                "purse", "wallet", "calculator", "mouse", "teapot", "cup")
CONTAINER_NAMES = ("basket", "tray", "box", "bowl", "plate")


@dataclass
class _Agent:
    room: str
    hands: list[str] = field(default_factory=list)          # at most two items: objects or containers
    inside: dict[str, list[str]] = field(default_factory=dict)   # container -> objects in it


class TransportEnv:
    """``n_agents`` agents transport ``n_objects`` target objects to the goal room of an ``n_rooms`` house.

    ``reset(seed)`` returns ``(observations, infos)``; ``step(actions)`` returns ``(observations, rewards,
    terminations, truncations, infos)`` keyed by agent name (``"alice"``, ``"bob"``), as PettingZoo's
    parallel API does. Rewards are the targets delivered in that step (shared). Observations are dicts;
    ``render_observation`` writes one as text.
    """

    metadata = {"name": "transport_v0"}

    def __init__(self, n_agents: int = 2, n_rooms: int = 5, n_objects: int = 6, n_containers: int = 2, *,
                 max_steps: int = 150, container_capacity: int = 3, seed: int | None = None) -> None:
        self.n_agents = check_int("n_agents", n_agents, minimum=1)
        if n_agents > 2:
            raise ValueError(f"n_agents must be 1 or 2, got {n_agents}")
        self.n_rooms = check_int("n_rooms", n_rooms, minimum=2)
        if n_rooms > len(ROOM_NAMES):
            raise ValueError(f"n_rooms must be <= {len(ROOM_NAMES)}, got {n_rooms}")
        self.n_objects = check_int("n_objects", n_objects, minimum=1)
        if n_objects > len(OBJECT_NAMES):
            raise ValueError(f"n_objects must be <= {len(OBJECT_NAMES)}, got {n_objects}")
        self.n_containers = check_int("n_containers", n_containers, minimum=0)
        if n_containers > len(CONTAINER_NAMES):
            raise ValueError(f"n_containers must be <= {len(CONTAINER_NAMES)}, got {n_containers}")
        self.max_steps = check_int("max_steps", max_steps, minimum=1)
        self.container_capacity = check_int("container_capacity", container_capacity, minimum=1)
        self.possible_agents = ["alice", "bob"][:n_agents]
        self._seed = seed
        self.agents: list[str] = []

    # -- the house ---------------------------------------------------------------------------------------------
    def reset(self, seed: int | None = None, options=None):
        rng = random.Random(self._seed if seed is None else seed)
        self.rooms = list(ROOM_NAMES[: self.n_rooms])
        # a corridor tree: each room joins one earlier room, so paths are unique and distances vary
        self.edges = {r: set() for r in self.rooms}
        for i, room in enumerate(self.rooms[1:], start=1):
            other = self.rooms[rng.randrange(i)]
            self.edges[room].add(other)
            self.edges[other].add(room)
        self.goal = rng.choice(self.rooms)
        self.targets = rng.sample(OBJECT_NAMES, self.n_objects)
        self.containers = rng.sample(CONTAINER_NAMES, self.n_containers)
        away = [r for r in self.rooms if r != self.goal]
        self.location = {item: rng.choice(away) for item in [*self.targets, *self.containers]}
        self.delivered: set[str] = set()
        self.explored = {a: set() for a in self.possible_agents}
        start = rng.choice(self.rooms)
        self.state = {a: _Agent(start) for a in self.possible_agents}
        self.steps = 0
        self.agents = list(self.possible_agents)
        self.inbox: dict[str, list[str]] = {a: [] for a in self.agents}
        self.last_action = {a: "none" for a in self.agents}
        return {a: self.observe(a) for a in self.agents}, {a: {} for a in self.agents}

    def path(self, start: str, end: str) -> list[str]:
        """Rooms from ``start`` (excluded) to ``end`` (included) along the corridors."""
        previous, queue = {start: None}, deque([start])
        while queue:
            room = queue.popleft()
            for nxt in sorted(self.edges[room]):
                if nxt not in previous:
                    previous[nxt] = room
                    queue.append(nxt)
        if end not in previous:
            raise ValueError(f"room {end!r} is not in the house {self.rooms}")
        route = []
        while end != start:
            route.append(end)
            end = previous[end]
        return route[::-1]

    # -- observations ------------------------------------------------------------------------------------------
    def observe(self, agent: str) -> dict:
        me = self.state[agent]
        here_items = [i for i, r in self.location.items() if r == me.room]
        explored = me.room in self.explored[agent]
        partner = next((a for a in self.agents if a != agent), None)
        return {
            "step": self.steps, "room": me.room, "rooms": list(self.rooms), "goal": self.goal,
            "neighbours": sorted(self.edges[me.room]), "explored": explored,
            "objects": sorted(i for i in here_items if i in self.targets) if explored else [],
            "containers": sorted(i for i in here_items if i in self.containers) if explored else [],
            "holding": list(me.hands), "inside": {c: list(o) for c, o in me.inside.items()},
            "targets": list(self.targets), "delivered": sorted(self.delivered),
            "partner": ({"name": partner, "room": self.state[partner].room,
                         "doing": self.last_action[partner]}
                        if partner and self.state[partner].room == me.room else None),
            "messages": list(self.inbox[agent]),
        }

    # -- dynamics ----------------------------------------------------------------------------------------------
    def step(self, actions: dict):
        if not self.agents:
            raise RuntimeError("the episode is over: call reset()")
        if not isinstance(actions, dict):
            raise TypeError(f"actions must be a dict of agent name to action, got {type(actions).__name__}")
        unknown = sorted(set(actions) - set(self.agents))
        if unknown:
            raise ValueError(f"actions name agents {unknown} that are not in the episode {self.agents}")
        for agent in self.agents:
            self.inbox[agent] = []
        before = len(self.delivered)
        for agent in self.agents:
            self.last_action[agent] = self._act(agent, actions.get(agent, {"type": "wait"}))
        self.steps += 1
        reward = float(len(self.delivered) - before)
        done = len(self.delivered) == len(self.targets)
        truncated = self.steps >= self.max_steps and not done
        observations = {a: self.observe(a) for a in self.agents}
        infos = {a: {"action": self.last_action[a]} for a in self.agents}
        result = (observations, {a: reward for a in self.agents}, {a: done for a in self.agents},
                  {a: truncated for a in self.agents}, infos)
        if done or truncated:
            self.agents = []
        return result

    def _act(self, agent: str, action: dict) -> str:
        if not isinstance(action, dict) or "type" not in action:
            raise ValueError(f"action for {agent} must be a dict with a 'type', got {action!r}")
        me, kind = self.state[agent], action["type"]
        if kind == "move":
            target = action.get("room")
            if target not in self.edges:
                raise ValueError(f"move needs a room of the house {self.rooms}, got {target!r}")
            if target != me.room:
                me.room = self.path(me.room, target)[0]
            return f"moving to the {target}"
        if kind == "explore":
            self.explored[agent].add(me.room)
            return f"exploring the {me.room}"
        if kind == "grasp":
            item = action.get("item")
            if (self.location.get(item) == me.room and me.room in self.explored[agent] and len(me.hands) < 2
                    and item not in self.delivered):
                del self.location[item]
                me.hands.append(item)
                if item in self.containers:
                    me.inside[item] = []
                return f"grasping the {item}"
            return f"failing to grasp the {item}"
        if kind == "put_in":
            obj, container = action.get("item"), action.get("container")
            if obj in me.hands and obj in self.targets and container in me.inside \
                    and len(me.inside[container]) < self.container_capacity:
                me.hands.remove(obj)
                me.inside[container].append(obj)
                return f"putting the {obj} into the {container}"
            return f"failing to put the {obj} into the {container}"
        if kind == "drop_at_goal":
            if me.room != self.goal:
                return "failing to drop outside the goal room"
            carried = [h for h in me.hands if h in self.targets]
            for container, contents in me.inside.items():
                carried += contents
                contents.clear()
            self.delivered.update(carried)
            me.hands = [h for h in me.hands if h not in self.targets]
            return f"delivering {len(carried)} objects"
        if kind == "message":
            text = str(action.get("text", "")).strip()
            for other in self.agents:
                if other != agent:
                    self.inbox[other].append(text)
            return "sending a message"
        if kind == "wait":
            return "waiting"
        raise ValueError(f"unknown action type {kind!r}")


def render_observation(obs: dict) -> str:
    """An observation as the text an LLM agent reads."""
    lines = [f"I am in the {obs['room']} (step {obs['step']}). Connected rooms: {', '.join(obs['neighbours'])}."]
    if obs["explored"]:
        lines.append(f"Here I see target objects: {', '.join(obs['objects']) or 'none'}; containers: "
                     f"{', '.join(obs['containers']) or 'none'}.")
    else:
        lines.append("I have not explored this room yet.")
    held = [f"a {h}" + (f" holding {', '.join(obs['inside'][h])}" if obs["inside"].get(h) else "")
            for h in obs["holding"]]
    lines.append(f"I hold {', '.join(held) or 'nothing'}.")
    if obs["partner"]:
        lines.append(f"I see {obs['partner']['name']} here, {obs['partner']['doing']}.")
    lines.extend(f"Message from my partner: {m}" for m in obs["messages"])
    return "\n".join(lines)
