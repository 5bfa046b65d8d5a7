import random

import pytest

from iclr24.coela import (
    CoELAAgent,
    HeuristicPlanner,
    Memory,
    Plan,
    RandomPlanner,
    TransportEnv,
    build_menu,
    parse_choice,
    render_observation,
    run_episode,
)
from iclr24.llm import get_model


def _env(**kwargs):
    env = TransportEnv(**{"n_agents": 2, "n_rooms": 4, "n_objects": 3, "n_containers": 1, "max_steps": 50, **kwargs})
    env.reset(seed=0)
    return env


def _place(env, item, room):
    env.location[item] = room


# ---- the environment's rules ---------------------------------------------------------------------------------

def test_exploration_reveals_contents_and_grasping_needs_it():
    env = _env()
    room = env.state["alice"].room
    item = env.targets[0]
    _place(env, item, room)
    obs = env.observe("alice")
    assert not obs["explored"] and obs["objects"] == []
    env.step({"alice": {"type": "grasp", "item": item}, "bob": {"type": "wait"}})
    assert item not in env.state["alice"].hands                     # not explored yet: cannot grasp
    obs, *_ = env.step({"alice": {"type": "explore"}, "bob": {"type": "wait"}})
    assert item in obs["alice"]["objects"] and obs["bob"]["objects"] == []   # exploring is per agent
    env.step({"alice": {"type": "grasp", "item": item}, "bob": {"type": "wait"}})
    assert env.state["alice"].hands == [item] and item not in env.location


def test_two_hands_and_container_capacity():
    env = _env(n_objects=5, container_capacity=2)
    room = env.state["alice"].room
    for item in [*env.targets, *env.containers]:
        _place(env, item, room)
    env.step({"alice": {"type": "explore"}, "bob": {"type": "wait"}})
    a, b, c, d = env.targets[:4]
    box = env.containers[0]
    for item in (box, a):
        env.step({"alice": {"type": "grasp", "item": item}, "bob": {"type": "wait"}})
    env.step({"alice": {"type": "grasp", "item": b}, "bob": {"type": "wait"}})
    assert env.state["alice"].hands == [box, a]                     # both hands full
    for item in (a, b, c):
        env.step({"alice": {"type": "put_in", "item": item, "container": box}, "bob": {"type": "wait"}})
        env.step({"alice": {"type": "grasp", "item": [b, c, d][[a, b, c].index(item)]}, "bob": {"type": "wait"}})
    assert env.state["alice"].inside[box] == [a, b]                # capacity 2: c stays in the hand
    assert env.state["alice"].hands == [box, c]


def test_delivery_only_in_the_goal_room_and_the_episode_ends():
    env = _env(n_objects=1, n_containers=0)
    item, start = env.targets[0], env.state["alice"].room
    env.goal = next(r for r in env.rooms if r != start)
    _place(env, item, start)
    env.step({"alice": {"type": "explore"}, "bob": {"type": "wait"}})
    env.step({"alice": {"type": "grasp", "item": item}, "bob": {"type": "wait"}})
    _, reward, *_ = env.step({"alice": {"type": "drop_at_goal"}, "bob": {"type": "wait"}})
    assert reward["alice"] == 0.0 and env.state["alice"].hands == [item]
    steps_needed = len(env.path(start, env.goal))
    for _ in range(steps_needed):
        env.step({"alice": {"type": "move", "room": env.goal}, "bob": {"type": "wait"}})
    assert env.state["alice"].room == env.goal
    _, reward, terminated, truncated, _ = env.step({"alice": {"type": "drop_at_goal"}, "bob": {"type": "wait"}})
    assert reward == {"alice": 1.0, "bob": 1.0} and all(terminated.values()) and not any(truncated.values())
    assert env.agents == []
    with pytest.raises(RuntimeError, match="call reset"):
        env.step({})


def test_a_message_costs_the_sender_a_step_and_reaches_the_partner_next():
    env = _env()
    room = env.state["alice"].room
    obs, *_ = env.step({"alice": {"type": "message", "text": "hello"}, "bob": {"type": "move", "room": room}})
    assert obs["bob"]["messages"] == ["hello"] and obs["alice"]["messages"] == []
    assert env.steps == 1 and env.last_action["alice"] == "sending a message"
    obs, *_ = env.step({"alice": {"type": "wait"}, "bob": {"type": "wait"}})
    assert obs["bob"]["messages"] == []                            # read once


def test_moves_follow_the_corridors_and_budget_truncates():
    env = _env(n_rooms=6, max_steps=3)
    start = env.state["alice"].room
    far = max(env.rooms, key=lambda r: len(env.path(start, r)))
    route = env.path(start, far)
    env.step({"alice": {"type": "move", "room": far}, "bob": {"type": "wait"}})
    assert env.state["alice"].room == route[0] and route[0] in env.edges[start]
    env.step({"alice": {"type": "wait"}, "bob": {"type": "wait"}})
    _, _, _, truncated, _ = env.step({"alice": {"type": "wait"}, "bob": {"type": "wait"}})
    assert all(truncated.values())


def test_env_is_seeded_and_checks_its_arguments():
    a, b = TransportEnv(seed=3), TransportEnv(seed=3)
    assert a.reset()[0] == b.reset()[0] and a.location == b.location
    assert TransportEnv().reset(seed=4)[0] != TransportEnv().reset(seed=5)[0]
    with pytest.raises(ValueError, match="n_agents must be 1 or 2"):
        TransportEnv(n_agents=3)
    with pytest.raises(ValueError, match="n_rooms must be <= 8"):
        TransportEnv(n_rooms=9)
    env = _env()
    with pytest.raises(ValueError, match="unknown action type 'fly'"):
        env.step({"alice": {"type": "fly"}})
    with pytest.raises(ValueError, match="move needs a room of the house"):
        env.step({"alice": {"type": "move", "room": "attic"}})
    with pytest.raises(ValueError, match=r"actions name agents \['carol'\]"):
        env.step({"carol": {"type": "wait"}})
    with pytest.raises(TypeError, match="actions must be a dict"):
        env.step([{"type": "wait"}])


# ---- memory, menu and parsing ----------------------------------------------------------------------------------

def test_memory_updates_from_observations_and_messages():
    env = _env()
    room = env.state["alice"].room
    item = env.targets[0]
    other = next(r for r in env.rooms if r != room)
    _place(env, item, room)
    for far in env.targets[1:]:
        _place(env, far, other)
    mem = Memory("alice")
    obs, *_ = env.step({"alice": {"type": "explore"}, "bob": {"type": "wait"}})
    mem.update(obs["alice"])
    assert mem.seen[item] == room and room in mem.explored and item in mem.news
    assert mem.partner_seen is not None                           # both agents start in one room
    mem.read_message(f"I found {env.targets[1]}, {env.targets[2]} in the {other}. I explored the {other}. "
                     f"I am going to grasp {env.targets[1]}.")
    assert mem.seen[env.targets[1]] == other and mem.seen[env.targets[2]] == other
    assert other in mem.partner_explored and mem.partner_claims == {env.targets[1]}
    env.step({"alice": {"type": "grasp", "item": item}, "bob": {"type": "wait"}})
    obs, *_ = env.step({"alice": {"type": "wait"}, "bob": {"type": "wait"}})
    mem.update(obs["alice"])
    assert item not in mem.seen and mem.holding == [item]
    mem.step += 11
    assert mem.partner_claims == set()                            # claims expire


def test_menu_offers_what_memory_allows():
    mem = Memory("alice", rooms=["kitchen", "office", "bedroom"], goal="bedroom", targets=["apple", "pen"],
                 room="kitchen", seen={"apple": "office", "box": "kitchen"}, containers={"box"})
    menu = build_menu(mem, communicate=True)
    described = [p.describe(mem.goal) for p in menu]
    assert described == ["send a message", "go grasp target object apple", "go grasp container box",
                         "go to office", "go to bedroom", "explore current room kitchen"]
    mem.holding, mem.inside, mem.actions = ["box", "pen"], {"box": []}, ["send a message"]
    described = [p.describe(mem.goal) for p in build_menu(mem, communicate=True)]
    assert "send a message" not in described                       # not twice in a row
    assert "put pen into the container box" in described and "transport held objects to the bedroom" in described
    assert not any(d.startswith("go grasp") for d in described)   # both hands full


def test_parse_choice_fallbacks_in_order():
    options = ['send a message: "I found the apple."', "go grasp target object apple", "go to office"]
    rng = random.Random(0)
    assert parse_choice("go grasp target object apple.", options, rng) == (1, "contained")
    # the official parser's order: containment first, the earliest option contained wins, a message by its words
    assert parse_choice("Not B. I will go to office, then go grasp target object apple", options, rng) == \
        (1, "contained")
    assert parse_choice("I should send a message to bob", options, rng) == (0, "contained")
    assert parse_choice("B", options, rng) == (1, "letter")
    assert parse_choice("The answer is C because it is close.", options, rng) == (2, "letter")
    assert parse_choice("go grasp the apple object", options, rng) == (1, "fuzzy")
    assert parse_choice("I think (B) is best", options, rng) == (1, "letter")
    assert parse_choice("A good plan is C", options, rng) == (2, "letter")
    assert parse_choice("I will go", options + ["x"] * 6, rng)[1] != "letter"      # the word I is no option
    with pytest.raises(ValueError, match="options must hold 1 to 26 plans"):
        parse_choice("A", [], rng)
    index, rule = parse_choice("I like turtles", options, rng)
    assert rule == "random" and 0 <= index < 3


def test_llm_planner_prompt_and_parse_counts_with_a_scripted_model():
    def reply(prompt, i):
        text = prompt[-1]["content"] if not isinstance(prompt, str) else prompt
        if "Write one short message" in text:
            return "I found nothing yet."
        options = [line for line in text.splitlines() if len(line) > 3 and line[1:3] == ". "]
        explore = next((line[0] for line in options if "explore current room" in line), None)
        return explore or "whatever"

    llm = get_model("scripted", outputs=reply)
    env = _env()
    agent = CoELAAgent(llm, communicate=False, cot=False, name="alice", seed=0)
    partner = CoELAAgent(planner=HeuristicPlanner(), communicate=False, name="bob")
    episode = run_episode(env, [agent, partner], seed=0)
    assert agent.parse_counts["letter"] >= 1 and agent.llm_calls == len(llm.calls)
    first = llm.calls[0]["prompt"][-1]["content"]
    assert "Available plans:" in first and "A. " in first and "Goal: transport" in first
    assert episode.transcript[0][2].startswith("exploring")          # the scripted choice was executed


def _plan_prompts(llm):
    return [c["prompt"][0]["content"] for c in llm.calls if "Available plans:" in c["prompt"][0]["content"]]


def test_the_message_is_written_before_planning_and_offered_in_the_menu():
    def reply(prompt, i):
        text = prompt[-1]["content"]
        if text.endswith("Message:"):
            return '"I explored the kitchen; I will look in the office."'
        return "A"                                      # the message option, when there is one

    llm = get_model("scripted", outputs=reply)
    env = TransportEnv(n_agents=2, n_rooms=4, n_objects=2, n_containers=0, max_steps=3)
    agents = [CoELAAgent(llm, communicate=True, cot=False, name=a, seed=0, message_tokens=128)
              for a in env.possible_agents]
    episode = run_episode(env, agents, seed=0)
    kinds = ["Message:" if c["prompt"][0]["content"].endswith("Message:") else "plan" for c in llm.calls]
    assert kinds[:2] == ["Message:", "plan"]                              # Communication, then Planning
    assert 'A. send a message: "I explored the kitchen; I will look in the office."' in _plan_prompts(llm)[0]
    sent = [message for _, _, action, message in episode.transcript if message]
    assert sent and sent[0] == "I explored the kitchen; I will look in the office."   # the text the planner saw
    assert agents[0].memory.actions[0] == "send a message"


def test_no_message_is_written_right_after_one_and_an_empty_one_is_not_offered():
    def reply(prompt, i):
        text = prompt[-1]["content"]
        if text.endswith("Message:"):
            return "   " if reply.empty else '"On my way to the office."'
        return "A"                                      # the message option when offered, else the first plan

    reply.empty = False
    llm = get_model("scripted", outputs=reply)
    env = TransportEnv(n_agents=2, n_rooms=4, n_objects=2, n_containers=0, max_steps=4)
    agent = CoELAAgent(llm, communicate=True, cot=False, name="alice", seed=0, message_tokens=128)
    partner = CoELAAgent(planner=HeuristicPlanner(), communicate=False, name="bob")
    run_episode(env, [agent, partner], seed=0)
    kinds = ["message" if c["prompt"][0]["content"].endswith("Message:") else "plan" for c in llm.calls]
    # step 0: message written, then offered and sent; step 1: the last plan was a message, so no message call
    assert kinds[:3] == ["message", "plan", "plan"]
    assert ". send a message" not in _plan_prompts(llm)[1]
    reply.empty = True
    llm = get_model("scripted", outputs=reply)
    agent = CoELAAgent(llm, communicate=True, cot=False, name="alice", seed=0)
    run_episode(TransportEnv(n_agents=2, n_rooms=4, n_objects=2, n_containers=0, max_steps=2),
                [agent, CoELAAgent(planner=HeuristicPlanner(), communicate=False, name="bob")], seed=0)
    assert all(". send a message" not in prompt for prompt in _plan_prompts(llm))  # nothing to send, no option


def test_the_planning_prompt_holds_the_dialogue_and_the_last_actions():
    llm = get_model("scripted", outputs=lambda prompt, i: "whatever")   # parsed at random: any plan
    env = TransportEnv(n_agents=2, n_rooms=5, n_objects=3, n_containers=0, max_steps=30)
    agent = CoELAAgent(llm, communicate=False, cot=False, name="alice", seed=0)
    partner = CoELAAgent(planner=HeuristicPlanner(), communicate=True, name="bob")
    run_episode(env, [agent, partner], seed=2)
    said = [text for who, text in agent.memory.dialogue if who == "partner"]
    assert said, "the partner sent no message: pick another seed"
    prompts = _plan_prompts(llm)
    last = prompts[-1]
    assert f"partner: {said[-1]}" in last                              # the dialogue, latest last
    assert f"Previous plans (latest last): {'; '.join(agent.memory.actions[-11:-1])}" in last
    assert agent.parse_counts["random"] == len(prompts)


def test_constrained_choice_reads_a_menu_line_on_a_backend_that_constrains():
    def reply(prompt, i):
        text = prompt[-1]["content"]
        return next(line for line in text.splitlines() if line[1:3] == ". " and ("explore" in line or "go to" in line))

    llm = get_model("scripted", outputs=reply, grammar=True)
    agent = CoELAAgent(llm, communicate=False, cot=False, name="alice")
    assert agent.choice == "constrained"
    env = TransportEnv(n_agents=1, n_rooms=3, n_objects=1, n_containers=0, max_steps=4)
    episode = run_episode(env, [agent], seed=1)
    assert agent.parse_counts["constrained"] == agent.llm_calls >= 1 and episode.parse_failure_rate == 0.0
    assert "Answer with the best next plan, as it is written above." in _plan_prompts(llm)[0]
    with pytest.raises(ValueError, match="choice='constrained' needs a backend that constrains"):
        CoELAAgent(get_model("scripted", outputs=["A"]), choice="constrained")


def test_chain_of_thought_asks_twice():
    replies = iter(["Let me think: exploring first is best.", "A"] * 50)
    llm = get_model("scripted", outputs=lambda prompt, i: next(replies))
    agent = CoELAAgent(llm, communicate=False, cot=True, name="alice")
    env = TransportEnv(n_agents=1, n_rooms=3, n_objects=1, n_containers=0, max_steps=2)
    run_episode(env, [agent], seed=1)
    assert len(llm.calls) >= 2 and llm.calls[1]["prompt"][1]["role"] == "assistant"
    assert "Let's think step by step" in llm.calls[0]["prompt"][0]["content"]


# ---- episodes and baselines --------------------------------------------------------------------------------------

def _mean_steps(n_agents, make_planner, comm=False, must_finish=True, seeds=range(8)):
    total = 0
    for seed in seeds:
        env = TransportEnv(n_agents=n_agents, n_rooms=6, n_objects=6, n_containers=2, max_steps=200)
        agents = [CoELAAgent(planner=make_planner(seed), communicate=comm, name=a, seed=seed)
                  for a in env.possible_agents]
        episode = run_episode(env, agents, seed)
        if must_finish:
            assert episode.finished and episode.transport_rate == 1.0, f"seed {seed} did not finish"
        total += episode.steps
    return total / len(seeds)


def test_heuristic_pair_is_deterministic_and_beats_one_agent_and_random():
    pair, single = _mean_steps(2, lambda s: HeuristicPlanner()), _mean_steps(1, lambda s: HeuristicPlanner())
    assert pair < 0.85 * single
    assert _mean_steps(2, lambda s: HeuristicPlanner()) == pair                     # deterministic
    # recorded at this commit: a change to any heuristic rule, the replanning loop or execution moves them
    assert (single, pair) == (33.5, 22.75)
    assert _mean_steps(2, lambda s: RandomPlanner(s), must_finish=False) > 2 * pair
    # with messages every episode still finishes (claims expire and ties resolve: no deadlock)
    with_messages = _mean_steps(2, lambda s: HeuristicPlanner(), comm=True)
    assert with_messages == 23.75                                                   # recorded, as above


def test_messages_report_news_once():
    for seed in range(8):
        env = TransportEnv(n_agents=2, n_rooms=6, n_objects=6, n_containers=2, max_steps=200)
        episode = run_episode(env, [CoELAAgent(planner=HeuristicPlanner(), name=a) for a in env.possible_agents],
                              seed)
        assert episode.messages <= 2 * env.n_objects                # at most one message per target found


def test_claims_made_in_the_same_step_go_to_the_first_agent():
    first, second = Memory("alice", rooms=["kitchen"], wins_ties=True), Memory("bob", rooms=["kitchen"],
                                                                              wins_ties=False)
    for mem in (first, second):
        mem.step = 5
        mem.my_claims["apple"] = 4                       # both said "going to grasp apple" in step 4
        mem.read_message("I am going to grasp apple.")   # and read the other's claim in step 5
    assert first.partner_claims == set() and second.partner_claims == {"apple"}
    late = Memory("carol", rooms=["kitchen"], wins_ties=True)
    late.step, late.my_claims["apple"] = 5, 2            # an older claim of mine beats a newer one
    late.read_message("I am going to grasp apple.")
    assert late.partner_claims == set()


def test_messages_never_resurrect_held_items_and_lone_agents_do_not_message():
    env = _env(n_agents=1)
    mem = Memory("alice")
    obs = env.observe("alice")
    obs["holding"], obs["messages"] = ["apple"], [f"I found apple in the {env.rooms[1]}."]
    mem.update(obs)
    assert "apple" not in mem.seen
    agent = CoELAAgent(planner=HeuristicPlanner(), communicate=True)
    episode = run_episode(TransportEnv(n_agents=1, n_rooms=4, n_objects=3), [agent], seed=0)
    assert episode.messages == 0 and episode.finished


def test_score_mode_picks_the_most_probable_letter():
    import torch

    table = torch.full((256,), -9.0)
    table[ord("B")] = -0.1

    llm = get_model("scripted", outputs=lambda p, i: "", logprobs=lambda ids: table)
    agent = CoELAAgent(llm, communicate=False, choice="score", name="alice")
    env = TransportEnv(n_agents=1, n_rooms=3, n_objects=1, n_containers=0, max_steps=1)
    env.reset(seed=0)
    others = [r for r in env.rooms if r != env.state["alice"].room]
    episode = run_episode(env, [agent], seed=0)
    assert episode.parse_counts == {"scored": 1} and episode.parse_failure_rate == 0.0
    # the menu is: A go to others[0], B go to others[1], C explore; B has the highest log-probability
    assert agent.memory.actions == [f"go to {others[1]}"]


def test_agent_arguments():
    with pytest.raises(ValueError, match="needs an llm or a planner"):
        CoELAAgent()
    with pytest.raises(ValueError, match="choice must be 'auto', 'constrained', 'generate' or 'score'"):
        CoELAAgent(planner=HeuristicPlanner(), choice="vote")
    with pytest.raises(TypeError, match="planner must have choose"):
        CoELAAgent(planner=object())
    with pytest.raises(TypeError, match="cot must be a bool"):
        CoELAAgent(planner=HeuristicPlanner(), cot="yes")
    with pytest.raises(RuntimeError, match="call reset"):
        CoELAAgent(planner=HeuristicPlanner()).act({})
    env = TransportEnv(n_agents=2)
    with pytest.raises(ValueError, match="env has 2 agents, got 1"):
        run_episode(env, [CoELAAgent(planner=HeuristicPlanner())], seed=0)
    twin = CoELAAgent(planner=HeuristicPlanner())
    with pytest.raises(ValueError, match="agents must be distinct objects"):
        run_episode(env, [twin, twin], seed=0)
    assert Plan("transport").describe("kitchen") == "transport held objects to the kitchen"
    text = render_observation(_env().observe("alice"))
    assert "I have not explored this room yet." in text and "I hold nothing." in text
